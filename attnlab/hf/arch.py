"""Architecture adapter: where a causal LM keeps its decoder blocks, attention output projections and MLPs.

Supported: Llama-style models (`model.model.layers[l].self_attn.o_proj`, an `nn.Linear`; Llama, Mistral, Qwen2/3,
OLMo/OLMo2, SmolLM2) and GPT-2 (`model.transformer.h[l].attn.c_proj`, a `Conv1D`). The per-head output matrix
W_O^h [d_model, d_head] is read in `nn.Linear` convention for both (spec extreme-tokens §10.2).
Soft-capped logits, learned sink logits and sliding windows shorter than the sequence are rejected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnlab.errors import InputError
from attnlab.trace.interventions import ModelShape

LLAMA_LIKE = {"llama", "mistral", "qwen2", "qwen3", "olmo", "olmo2", "smollm3"}
GPT2_LIKE = {"gpt2"}


@dataclass
class Arch:
    """Handles on one model's blocks. `out_proj[l]` takes the concatenated heads z [B,T,H·d_h] as its input."""

    kind: str  # "llama" or "gpt2"
    model_type: str
    blocks: list[nn.Module]
    attn: list[nn.Module]
    out_proj: list[nn.Module]
    mlp: list[nn.Module]
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_model: int
    max_positions: int
    sliding_window: int | None

    def w_o(self, layer: int) -> torch.Tensor:
        """[d_model, H·d_h] output projection of `layer` in Linear convention (y = W z + b)."""
        w: torch.Tensor = self.out_proj[layer].weight  # type: ignore[assignment]
        return w if self.kind == "llama" else w.T

    def w_o_heads(self, layer: int) -> torch.Tensor:
        """[H, d_model, d_h]: W_O^h = W_O[:, h·d_h:(h+1)·d_h]."""
        w = self.w_o(layer).detach()
        return w.reshape(self.d_model, self.n_heads, self.head_dim).permute(1, 0, 2)

    @property
    def shape(self) -> ModelShape:
        """What interventions and head indices are checked against (every layer has attention and an MLP)."""
        return ModelShape(n_layers=self.n_layers, n_heads=self.n_heads, d_model=self.d_model)

    def check_seq_len(self, seq_len: int) -> None:
        """Refuse sequences longer than the context or than a sliding window (one-line `InputError`)."""
        if seq_len > self.max_positions:
            raise InputError(
                f"--tokens {seq_len} is longer than the model's context "
                f"(max_position_embeddings = {self.max_positions})"
            )
        if self.sliding_window is not None and seq_len > self.sliding_window:
            raise InputError(
                f"--tokens {seq_len} exceeds the sliding window ({self.sliding_window}) of this "
                f"{self.model_type} model; sliding-window attention is not supported"
            )


def get_arch(model: nn.Module) -> Arch:
    """Inspect `model` (a transformers causal LM) or raise a one-line InputError naming what is unsupported."""
    cfg: Any = model.config
    inner: Any = model  # a transformers model: its submodules are found by attribute
    mtype = getattr(cfg, "model_type", type(model).__name__)
    for feat in ("attn_logit_softcapping", "final_logit_softcapping"):
        if getattr(cfg, feat, None):
            raise InputError(f"{mtype}: soft-capped attention logits ({feat}) are not supported")
    if any("sinks" in name for name, _ in model.named_parameters()):
        raise InputError(f"{mtype}: learned attention-sink logits are not supported")
    window = None
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        window = int(cfg.sliding_window)
    if mtype in LLAMA_LIKE and hasattr(inner, "model") and hasattr(inner.model, "layers"):
        blocks = list(inner.model.layers)
        attn = [b.self_attn for b in blocks]
        out_proj = [a.o_proj for a in attn]
        n_heads = cfg.num_attention_heads
        n_kv = getattr(cfg, "num_key_value_heads", None) or n_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads
        kind, d_model, max_pos = "llama", cfg.hidden_size, cfg.max_position_embeddings
    elif mtype in GPT2_LIKE and hasattr(model, "transformer"):
        if getattr(cfg, "add_cross_attention", False):
            raise InputError("gpt2 with cross-attention is not a decoder-only causal LM")
        if getattr(cfg, "reorder_and_upcast_attn", False):
            raise InputError("gpt2: reorder_and_upcast_attn is not supported")
        blocks = list(inner.transformer.h)
        attn = [b.attn for b in blocks]
        out_proj = [a.c_proj for a in attn]
        n_heads = n_kv = cfg.n_head
        head_dim = cfg.n_embd // cfg.n_head
        kind, d_model, max_pos = "gpt2", cfg.n_embd, cfg.n_positions
    else:
        raise InputError(
            f"unsupported architecture {type(model).__name__} (model_type {mtype!r}); supported: "
            f"{', '.join(sorted(LLAMA_LIKE | GPT2_LIKE))}"
        )
    if n_heads % n_kv:
        raise InputError(f"{mtype}: {n_heads} query heads are not a multiple of {n_kv} KV heads")
    return Arch(
        kind=kind,
        model_type=mtype,
        blocks=blocks,
        attn=attn,
        out_proj=out_proj,
        mlp=[b.mlp for b in blocks],
        n_layers=len(blocks),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        d_model=d_model,
        max_positions=int(max_pos),
        sliding_window=window,
    )
