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
}
# Families whose attention does not go through AttentionInterface: refused with one line.
UNTRACEABLE: dict[str, tuple[str, dict[str, Any]]] = {
    "falcon": ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2}),  # its own attention code
    "bloom": ("bloom", {"n_layer": 2, "n_head": 4}),  # ALiBi in its own attention code
}


def family_config(name: str, **override: Any) -> Any:
    """The transformers config of tiny family `name` (`override`: other fields, e.g. vocab_size)."""
    from transformers import AutoConfig

    model_type, extra = FAMILIES[name] if name in FAMILIES else UNTRACEABLE[name]
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
