"""Architecture discovery: where a causal LM keeps its decoder blocks, attention output projections and MLPs.

Found by walking the module tree, not from a list of model types: the decoder blocks are the first `nn.ModuleList`
of `num_hidden_layers` modules that each hold an attention module (a child with `layer_idx` and an output
projection named o_proj, c_proj, out_proj or dense, an `nn.Linear` or GPT-2's transposed `Conv1D`) and an MLP (a
child named mlp or feed_forward). Sizes come from the config (`num_attention_heads`, `num_key_value_heads`,
`head_dim`, `hidden_size`, `max_position_embeddings`, with transformers' attribute aliases). The per-head output
matrix W_O^h [d_model, d_head] is read in `nn.Linear` convention (spec extreme-tokens §10.2). Tracing also needs the
attention to go through transformers' `AttentionInterface`; the HF trace adapter checks that every layer did.
Soft-capped logits, learned sink logits, cross-attention and sliding windows shorter than the sequence are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnlab.errors import InputError
from attnlab.trace.interventions import ModelShape

OUT_PROJ_NAMES = ("o_proj", "c_proj", "out_proj", "dense")
MLP_NAMES = ("mlp", "feed_forward")


@dataclass
class Arch:
    """Handles on one model's blocks. `out_proj[l]` takes the concatenated heads z [B,T,H·d_h] as its input."""

    kind: str  # "linear" (W_O weight [d_model, H·d_h]) or "conv1d" (GPT-2: its transpose)
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
    max_positions: int | None  # None: no learned or rotary position limit in the config (e.g. ALiBi)
    sliding_window: int | None

    def w_o(self, layer: int) -> torch.Tensor:
        """[d_model, H·d_h] output projection of `layer` in Linear convention (y = W z + b)."""
        w: torch.Tensor = self.out_proj[layer].weight  # type: ignore[assignment]
        return w if self.kind == "linear" else w.T

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
        if self.max_positions is not None and seq_len > self.max_positions:
            raise InputError(
                f"--tokens {seq_len} is longer than the model's context "
                f"(max_position_embeddings = {self.max_positions})"
            )
        if self.sliding_window is not None and seq_len > self.sliding_window:
            raise InputError(
                f"--tokens {seq_len} exceeds the sliding window ({self.sliding_window}) of this "
                f"{self.model_type} model; sliding-window attention is not supported"
            )


def _attention_of(block: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """(attention module, its output projection) among the block's children, or None."""
    for name, child in block.named_children():
        if "cross" in name or not hasattr(child, "layer_idx"):
            continue
        for proj_name in OUT_PROJ_NAMES:
            proj = getattr(child, proj_name, None)
            if isinstance(proj, nn.Module) and (isinstance(proj, nn.Linear) or type(proj).__name__ == "Conv1D"):
                return child, proj
    return None


def _mlp_of(block: nn.Module) -> nn.Module | None:
    return next((getattr(block, n) for n in MLP_NAMES if isinstance(getattr(block, n, None), nn.Module)), None)


def _decoder_blocks(model: nn.Module, n_layers: int) -> list[nn.Module] | None:
    """The first `nn.ModuleList` of `n_layers` blocks that each hold an attention module and an MLP."""
    for _, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) == n_layers and n_layers > 0:
            if all(_attention_of(b) is not None and _mlp_of(b) is not None for b in mod):
                return list(mod)
    return None


def _refuse_unsupported(model: nn.Module, cfg: Any, mtype: str) -> None:
    """One-line errors for attention this tracer would get wrong."""
    for feat in ("attn_logit_softcapping", "final_logit_softcapping"):
        if getattr(cfg, feat, None):
            raise InputError(f"{mtype}: soft-capped attention logits ({feat}) are not supported")
    if any("sinks" in name for name, _ in model.named_parameters()):
        raise InputError(f"{mtype}: learned attention-sink logits are not supported")
    if getattr(cfg, "add_cross_attention", False):
        raise InputError(f"{mtype} with cross-attention is not a decoder-only causal LM")
    if getattr(cfg, "reorder_and_upcast_attn", False):
        raise InputError(f"{mtype}: reorder_and_upcast_attn is not supported")


def get_arch(model: nn.Module) -> Arch:
    """Inspect `model` (a transformers causal LM) or raise a one-line InputError naming what is unsupported."""
    cfg: Any = model.config
    mtype = getattr(cfg, "model_type", type(model).__name__)
    _refuse_unsupported(model, cfg, mtype)
    n_layers = getattr(cfg, "num_hidden_layers", None)
    blocks = _decoder_blocks(model, int(n_layers)) if isinstance(n_layers, int) else None
    if blocks is None:
        raise InputError(
            f"unsupported architecture {type(model).__name__} (model_type {mtype!r}): no decoder blocks "
            f"with an attention module ({' / '.join(OUT_PROJ_NAMES)}) and an MLP found"
        )
    found = [_attention_of(b) for b in blocks]
    attn = [f[0] for f in found if f is not None]
    out_proj = [f[1] for f in found if f is not None]
    n_heads = int(cfg.num_attention_heads)
    n_kv = int(getattr(cfg, "num_key_value_heads", None) or n_heads)
    d_model = int(cfg.hidden_size)
    head_dim = int(getattr(cfg, "head_dim", None) or d_model // n_heads)
    if n_heads % n_kv:
        raise InputError(f"{mtype}: {n_heads} query heads are not a multiple of {n_kv} KV heads")
    max_pos = getattr(cfg, "max_position_embeddings", None)
    window = None
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        window = int(cfg.sliding_window)
    return Arch(
        kind="linear" if isinstance(out_proj[0], nn.Linear) else "conv1d",
        model_type=mtype,
        blocks=blocks,
        attn=attn,
        out_proj=out_proj,
        mlp=[_mlp_of(b) for b in blocks],  # type: ignore[misc]
        n_layers=len(blocks),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        d_model=d_model,
        max_positions=int(max_pos) if max_pos is not None else None,
        sliding_window=window,
    )
