"""Architecture discovery: where a causal LM keeps its decoder blocks, attention output projections and MLPs.

Found by walking the module tree, not from a list of model types: the decoder blocks are the first `nn.ModuleList`
of `num_hidden_layers` modules that each hold an attention module (a child, not a cross-attention, with an output
projection named o_proj, c_proj, out_proj or dense, an `nn.Linear` or GPT-2's transposed `Conv1D`) and an MLP: a
child named mlp, feed_forward, block_sparse_moe, moe or ffn (dense or mixture-of-experts), or else the block's own
`fc2` (OPT keeps fc1/fc2 in the block; fc2's output is the MLP's contribution). Sequential and parallel blocks
(GPT-NeoX, Phi, Falcon, Cohere) look alike from here: every hook acts on a module's output.
Norms are the modules whose class name says Norm (RMSNorm, LayerNorm, OLMo's weightless LayerNorm, ...). A block's
input norm is its first norm child not named `post_*` (those normalise a sublayer's output: OLMo 2 and OPT with
`do_layer_norm_before = False` are post-norm and have none); the final norm is the last norm child of the module
that holds the blocks' `nn.ModuleList` (beside them: `norm`, `ln_f`, `final_layernorm`, OPT's `final_layer_norm`).
Sizes come from the config (`num_attention_heads`, `num_key_value_heads`, `hidden_size`, `max_position_embeddings`
with transformers' attribute aliases) and the attention module (`head_dim` / `head_size`, `sliding_window`, a
`sinks` parameter for learned sink logits). The per-head output matrix W_O^h [d_model, d_head] is read in
`nn.Linear` convention (spec extreme-tokens §10.2). Tracing also needs the attention to go through transformers'
`AttentionInterface`; the HF trace adapter checks that every layer did. Cross-attention and GPT-2's
`reorder_and_upcast_attn` are refused; sliding windows, soft-capping and learned sinks are traced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from attnlab.errors import InputError
from attnlab.tracing.interventions import ModelShape

OUT_PROJ_NAMES = ("o_proj", "c_proj", "out_proj", "dense")
MLP_NAMES = ("mlp", "feed_forward", "block_sparse_moe", "moe", "ffn")
MLP_OUT_NAMES = ("fc2",)  # an MLP written inline in the block (OPT): its last projection


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
    windows: list[int | None]  # per layer: the sliding window (keys i−W+1..i), None for full causal attention
    has_sinks: bool  # learned sink logits (a `sinks` parameter per head, gpt-oss)
    input_norms: list[nn.Module | None] = field(default_factory=list)  # per layer: the norm before attention
    final_norm: nn.Module | None = None  # the norm between the last block and the head (None: the model has none)

    @property
    def sliding_window(self) -> int | None:
        """The smallest sliding window of any layer (None: every layer attends to the whole prefix)."""
        ws = [w for w in self.windows if w is not None]
        return min(ws) if ws else None

    def w_o(self, layer: int) -> torch.Tensor:
        """[d_model, H·d_h] output projection of `layer` in Linear convention (y = W z + b)."""
        w = _weight(self.out_proj[layer])
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
        """Refuse sequences longer than the context (one-line `InputError`); sliding windows are traced."""
        if self.max_positions is not None and seq_len > self.max_positions:
            raise InputError(
                f"--tokens {seq_len} is longer than the model's context "
                f"(max_position_embeddings = {self.max_positions})"
            )


def _weight(proj: nn.Module) -> torch.Tensor:
    """proj.weight, read from accelerate's offload map when a device map keeps it on the meta device (disk/CPU
    offload loads weights only inside the module's own forward)."""
    w: torch.Tensor = proj.weight  # type: ignore[assignment]
    if w.device.type == "meta":
        hook = getattr(proj, "_hf_hook", None)
        wmap = getattr(hook, "weights_map", None)
        if wmap is None:
            raise InputError("an output projection's weights are on the meta device and no offload map holds them")
        w = wmap["weight"]
    return w


def _attention_of(block: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """(attention module, its output projection) among the block's children, or None."""
    for name, child in block.named_children():
        if "cross" in name or getattr(child, "is_cross_attention", False):
            continue
        for proj_name in OUT_PROJ_NAMES:
            proj = getattr(child, proj_name, None)
            if isinstance(proj, nn.Module) and (isinstance(proj, nn.Linear) or type(proj).__name__ == "Conv1D"):
                return child, proj
    return None


def mlp_of(block: nn.Module) -> nn.Module | None:
    """The module whose output is the block's MLP contribution (see the module docstring), or None."""
    for n in (*MLP_NAMES, *MLP_OUT_NAMES):
        mod = getattr(block, n, None)
        if isinstance(mod, nn.Module):
            return mod
    return None


def is_norm(module: nn.Module) -> bool:
    """A normalisation module: torch's LayerNorm / RMSNorm or a class whose name says Norm (HF's RMSNorms)."""
    return isinstance(module, (nn.LayerNorm, nn.RMSNorm)) or "norm" in type(module).__name__.lower()


def input_norm_of(block: nn.Module, config: Any = None) -> nn.Module | None:
    """The norm a pre-norm block applies to its input x [B, T, d] before attention (for a parallel block with one
    norm, the norm of both sublayers): its first norm child not named `post_*`; None for a post-norm block."""
    if getattr(config, "do_layer_norm_before", True) is False:  # OPT-350m: the block's norms follow its sublayers
        return None
    for name, child in block.named_children():
        if is_norm(child) and not name.startswith("post"):
            return child
    return None


def stack_owner(model: nn.Module, blocks: list[nn.Module]) -> nn.Module:
    """The module whose child `nn.ModuleList` holds the decoder blocks (its final norm sits beside them)."""
    for mod in model.modules():
        for child in mod.children():
            if isinstance(child, nn.ModuleList) and len(child) and child[0] is blocks[0]:
                return mod
    raise InputError(f"{type(model).__name__}: no module holds the decoder blocks")


def final_norm_of(model: nn.Module, blocks: list[nn.Module]) -> nn.Module | None:
    """The norm applied to the last block's output [B, T, d] before the head: the last norm child of the module
    holding the blocks (after an embedding norm, if the model has one), None if it has none."""
    norms = [c for c in stack_owner(model, blocks).children() if is_norm(c)]
    return norms[-1] if norms else None


def _decoder_blocks(model: nn.Module, n_layers: int) -> list[nn.Module] | None:
    """The first `nn.ModuleList` of `n_layers` blocks that each hold an attention module and an MLP."""
    for _, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) == n_layers and n_layers > 0:
            if all(_attention_of(b) is not None and mlp_of(b) is not None for b in mod):
                return list(mod)
    return None


def _refuse_unsupported(model: nn.Module, cfg: Any, mtype: str) -> None:
    """One-line errors for attention this tracer would get wrong."""
    if getattr(cfg, "is_encoder_decoder", False):
        raise InputError(f"{mtype} is an encoder-decoder model; attnlab traces decoder-only causal LMs")
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
            f"with an attention module (output projection {' / '.join(OUT_PROJ_NAMES)}) and an MLP "
            f"({' / '.join(MLP_NAMES + MLP_OUT_NAMES)}) found"
        )
    found = [_attention_of(b) for b in blocks]
    attn = [f[0] for f in found if f is not None]
    out_proj = [f[1] for f in found if f is not None]
    n_heads, n_kv, head_dim, d_model = _sizes(cfg, attn[0], mtype)
    max_pos = getattr(cfg, "max_position_embeddings", None)
    return Arch(
        kind="linear" if isinstance(out_proj[0], nn.Linear) else "conv1d",
        model_type=mtype,
        blocks=blocks,
        attn=attn,
        out_proj=out_proj,
        mlp=[mlp_of(b) for b in blocks],  # type: ignore[misc]
        n_layers=len(blocks),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        d_model=d_model,
        max_positions=int(max_pos) if max_pos is not None else None,
        windows=[_window_of(a, cfg) for a in attn],
        has_sinks=any(isinstance(getattr(a, "sinks", None), nn.Parameter) for a in attn),
        input_norms=[input_norm_of(b, cfg) for b in blocks],
        final_norm=final_norm_of(model, blocks),
    )


def _sizes(cfg: Any, attn: nn.Module, mtype: str) -> tuple[int, int, int, int]:
    """(H, H_kv, d_h, d_model) from the config, with the attention module's own head size when it has one."""
    n_heads = int(cfg.num_attention_heads)
    groups = getattr(attn, "num_key_value_groups", None)
    own_kv = getattr(attn, "num_key_value_heads", None) or getattr(attn, "num_kv_heads", None)
    # the attention module knows its KV heads; configs may carry an unused num_key_value_heads (GPT-2, OPT)
    n_kv = int(n_heads // groups if groups else own_kv or n_heads)
    d_model = int(cfg.hidden_size)
    own = getattr(attn, "head_dim", None) or getattr(attn, "head_size", None)
    head_dim = int(own or getattr(cfg, "head_dim", None) or d_model // n_heads)
    if n_heads % n_kv:
        raise InputError(f"{mtype}: {n_heads} query heads are not a multiple of {n_kv} KV heads")
    return n_heads, n_kv, head_dim, d_model


def _window_of(attn: nn.Module, cfg: Any) -> int | None:
    """The sliding window of one attention module (its own attribute, else the config's), None if full."""
    w: Any = None
    if hasattr(attn, "sliding_window"):
        w = attn.sliding_window
    elif getattr(cfg, "use_sliding_window", True) and not getattr(cfg, "layer_types", None):
        w = getattr(cfg, "sliding_window", None)
    return int(w) if isinstance(w, int) and w > 0 else None
