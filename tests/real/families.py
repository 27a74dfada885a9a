"""Tiny random causal LMs of many transformers families, built from configs (no download), for the generic tests.

`FAMILIES` maps a name to (model_type, config overrides); `tiny_family(name)` builds the model in eval mode, seeded
inside `torch.random.fork_rng` so the caller's global RNG is untouched. Each config is as small as the family
allows (d_model 32, 4 heads, 2-4 layers) and exercises the feature named in the comment.
"""

from __future__ import annotations

from typing import Any

import torch

V = 64
BASE: dict[str, Any] = {
    "vocab_size": V,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
MOE = {"num_local_experts": 4, "num_experts_per_tok": 2}
MLA: dict[str, Any] = {  # DeepSeek-V3's latent attention: d_v = 6 ≠ d_qk = 8 + 4 (rotary); a dense layer, then MoE
    "num_key_value_heads": 4,
    "kv_lora_rank": 16,
    "q_lora_rank": 24,
    "qk_rope_head_dim": 4,
    "qk_nope_head_dim": 8,
    "v_head_dim": 6,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 16,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
}

FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("llama", {}),
    "mistral-window": ("mistral", {"sliding_window": 6}),  # sliding window shorter than the sequence
    "qwen2": ("qwen2", {}),  # q/k/v biases
    "qwen3": ("qwen3", {"head_dim": 8}),  # q/k norms
    "gemma": ("gemma", {"head_dim": 8}),
    "gemma2": (  # soft-capped logits, alternating sliding/full layers
        "gemma2",
        {"head_dim": 8, "sliding_window": 5, "attn_logit_softcapping": 5.0, "final_logit_softcapping": 3.0},
    ),
    "gemma3": (
        "gemma3_text",
        {"head_dim": 8, "sliding_window": 5, "num_hidden_layers": 3, "sliding_window_pattern": 2},
    ),
    "phi": ("phi", {"partial_rotary_factor": 0.5, "num_key_value_heads": 4}),  # parallel block, partial rotary
    "phi3": ("phi3", {"partial_rotary_factor": 0.5}),  # fused qkv and gate_up
    "gpt-neox": ("gpt_neox", {"rotary_pct": 0.25, "num_key_value_heads": None}),  # parallel block, fused qkv
    "gpt2": (
        "gpt2",
        {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64, "num_key_value_heads": None},
    ),  # learned positions, Conv1D
    "opt": (
        "opt",
        {"ffn_dim": 48, "word_embed_proj_dim": 32, "num_key_value_heads": None},
    ),  # learned positions, fc1/fc2 in the block
    "olmo": ("olmo", {}),
    "olmo2": ("olmo2", {}),
    "cohere": ("cohere", {}),  # parallel block
    "mixtral": ("mixtral", MOE),  # mixture of experts
    "qwen2-moe": (
        "qwen2_moe",
        {
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 16,
            "shared_expert_intermediate_size": 16,
        },
    ),
    "gpt-oss": ("gpt_oss", {**MOE, "head_dim": 8, "sliding_window": 6, "rope_parameters": None}),  # learned sink logits
    "stablelm": ("stablelm", {"partial_rotary_factor": 0.25}),
    "granite": ("granite", {"attention_multiplier": 0.5, "residual_multiplier": 0.7, "logits_scaling": 2.0}),
    "starcoder2": ("starcoder2", {}),
    "smollm3": ("smollm3", {}),
    "cohere2": ("cohere2", {"sliding_window": 5, "num_hidden_layers": 2}),  # parallel block, sliding + full
    "deepseek-v3": ("deepseek_v3", MLA),  # multi-head latent attention: value heads (6) narrower than q/k (12)
}
# Families whose attention module computes its own attention (not through transformers' AttentionInterface): traced
# by the eager fallback from the weights `output_attentions` returns (`attnlab.tracing.adapters.eager`).
EAGER: dict[str, tuple[str, dict[str, Any]]] = {
    "falcon": ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2}),  # rotary, grouped KV
    "bloom": ("bloom", {"n_layer": 2, "n_head": 4}),  # ALiBi
    "gpt-neo": ("gpt_neo", {"num_layers": 2, "attention_types": [[["global", "local"], 1]], "window_size": 6}),
    "mpt": ("mpt", {"d_model": 32, "n_heads": 4, "n_layers": 2, "max_seq_len": 64}),  # ALiBi, fused Wqkv
    "xglm": ("xglm", {"d_model": 32, "ffn_dim": 48, "num_layers": 2, "attention_heads": 4}),  # sinusoidal positions
}
# Hybrids: some layers mix tokens by a state-space, linear-attention or convolution layer (traced: their attention
# layers; the others are reported as "none").
HYBRID: dict[str, tuple[str, dict[str, Any]]] = {
    "jamba": (
        "jamba",
        {
            "num_hidden_layers": 4,
            "attn_layer_period": 2,
            "attn_layer_offset": 1,
            "num_experts": 2,
            "expert_layer_period": 2,
            "expert_layer_offset": 1,
            "mamba_d_state": 4,
            "mamba_dt_rank": 4,
        },
    ),  # fmt: skip
    "bamba": (
        "bamba",
        {
            "mamba_n_heads": 4,
            "mamba_d_head": 16,
            "mamba_n_groups": 1,
            "mamba_d_state": 8,
            "attn_layer_indices": [1],
            "mamba_chunk_size": 8,
        },
    ),  # fmt: skip
    "qwen3-next": (
        "qwen3_next",
        {
            "num_hidden_layers": 4,
            "head_dim": 8,
            "linear_num_value_heads": 4,
            "linear_num_key_heads": 2,
            "linear_key_head_dim": 8,
            "linear_value_head_dim": 8,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 16,
            "shared_expert_intermediate_size": 16,
        },
    ),  # fmt: skip  # gated DeltaNet (linear attention) in layers 0-2
    "lfm2": ("lfm2", {"num_hidden_layers": 4, "layer_types": ["conv", "full_attention", "conv", "full_attention"]}),
    "falcon-h1": ("falcon_h1", {}),  # attention and Mamba side by side in every block: every layer is attention
}
# Families the generic tests do not cover, each traced through AttentionInterface (issue 40: no raw library error).
MORE: dict[str, tuple[str, dict[str, Any]]] = {
    "gptj": ("gptj", {"n_embd": 32, "n_layer": 2, "n_head": 4, "rotary_dim": 4, "n_positions": 64}),
    "codegen": ("codegen", {"n_embd": 32, "n_layer": 2, "n_head": 4, "rotary_dim": 4, "n_positions": 64, "n_ctx": 64}),
    "persimmon": ("persimmon", {}),
    "biogpt": ("biogpt", {}),
    "exaone4": ("exaone4", {}),
    "glm": ("glm", {}),
    "helium": ("helium", {"head_dim": 8}),
    "gpt-bigcode": ("gpt_bigcode", {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64}),  # multi-query
    "nemotron": ("nemotron", {}),
    "minimax": ("minimax", {**MOE}),  # lightning (linear) attention in layer 0: a hybrid
    "deepseek-v3-wide-v": ("deepseek_v3", {**MLA, "v_head_dim": 16}),  # d_v = 16 > d_qk = 12
}
# No attention at all: refused in one line before any forward.
NO_ATTENTION: dict[str, tuple[str, dict[str, Any]]] = {"mamba": ("mamba", {})}
ALL = {**FAMILIES, **EAGER, **HYBRID, **MORE, **NO_ATTENTION}


def family_config(name: str, **override: Any) -> Any:
    """The transformers config of tiny family `name` (`override`: other fields, e.g. vocab_size)."""
    from transformers import AutoConfig

    model_type, extra = ALL[name]
    kw = {**BASE, **extra, **override}
    kw = {k: v for k, v in kw.items() if v is not None}
    return AutoConfig.for_model(model_type, **kw)


def tiny_family(name: str, seed: int = 0, **override: Any) -> Any:
    """A tiny random causal LM of family `name`, eval mode, fp32, sdpa attention where the family has it."""
    from transformers import AutoModelForCausalLM

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(family_config(name, **override))
    return model.eval()


def save_family_folder(name: str, path: Any) -> Any:
    """Save tiny family `name` with the byte-level tokenizer (vocabulary 259) as a local HF folder at `path`."""
    from tests.real.conftest import byte_level_tokenizer

    tok, vocab = byte_level_tokenizer()
    tiny_family(name, vocab_size=len(vocab)).save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return path
