"""A small pre-LN transformer for the BB task (spec extreme-tokens §3), readable in one sitting.

x⁰_i = E[x_i] + P[i];  per block  x ← x + Attn(LN₁ x),  x ← x + MLP(LN₂ x);  logits = W_U LN_f(x).
The `parallel` block (R19) instead reads one normalised input for both: h = LN₁ x,  x ← x + Attn(h) + MLP(h).
Attention per head (d_h = d/H, no biases): s_ij = q_i·k_j/√d_h, and
  softmax: A_ij = exp(s_ij) / Σ_{j'≤i} exp(s_ij')
  relu:    A_ij = ReLU(s_ij) / (i+1)  for j ≤ i   (rows need not sum to 1 and may be all zero)
o_i = Σ_h W_O^h Σ_j A^h_ij v^h_j.

Hook points are parameter-free `HookPoint` modules, named as TransformerLens names them, so that `named_modules()`
lists them (tensor shapes; B batch, T positions, H heads, D = d_model, d = d_head):
  hook_embed [B,T,D]; blocks.l.hook_resid_pre [B,T,D]; blocks.l.attn.hook_q, hook_k, hook_v [B,T,H,d] (the
  projections: no rotary embedding here); blocks.l.attn.hook_attn_scores [B,H,T,T] (pre-mask: the future cells hold
  q·k too, where TransformerLens and the transformers adapter put −inf); blocks.l.attn.hook_pattern [B,H,T,T];
  blocks.l.attn.hook_z [B,T,H,d] (before W_O); blocks.l.hook_attn_out [B,T,D]; blocks.l.hook_resid_mid [B,T,D];
  blocks.l.hook_mlp_out [B,T,D]; blocks.l.hook_resid_post [B,T,D]; ln_final.hook_normalized [B,T,D]; hook_logits
  [B,T,V]. The attention points
of a layer without attention (`no_attn`) do not exist. They hold no parameters or buffers: the state_dict is the
model's weights alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from attnlab.errors import InputError

ATTENTION_KINDS = ("softmax", "relu")
BLOCKS = ("sequential", "parallel")
# Softmax attention over at least this many positions runs PyTorch's fused kernel when no hook reads the scores or
# the pattern: it skips the masked half and never stores [B,H,T,T] (at the paper's T = 256, batch 512: 134 MB per
# tensor). Shorter sequences (the cpu preset's T = 64, the demo) keep the explicit path, whose results are
# bit-identical with earlier versions; the fused kernel sums in another order (within 1e-5, tests/bb/test_fused.py).
# On CUDA every unhooked softmax step is fused, whatever T (training steps; snapshots run hooked, on the cpu).
FUSED_MIN_LEN = 128


@dataclass
class ToyConfig:
    """Architecture of the toy transformer. `no_attn`, `no_mlp`, `linear_mlp` list layer indices."""

    vocab: int = 66
    d_model: int = 128
    n_layers: int = 1
    n_heads: int = 1
    d_mlp: int = 512
    max_len: int = 64
    attn: str = "softmax"
    no_attn: list[int] = field(default_factory=list)
    no_mlp: list[int] = field(default_factory=list)
    linear_mlp: list[int] = field(default_factory=list)
    block: str = "sequential"

    def validate(self) -> ToyConfig:
        if self.attn not in ATTENTION_KINDS:
            raise InputError(f"attention {self.attn!r} is not one of {', '.join(ATTENTION_KINDS)}")
        if self.block not in BLOCKS:
            raise InputError(f"block {self.block!r} is not one of {', '.join(BLOCKS)}")
        for name in ("vocab", "d_model", "n_layers", "n_heads", "d_mlp", "max_len"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"{name}={getattr(self, name)} must be a positive integer")
        if self.d_model % self.n_heads:
            raise InputError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        for name in ("no_attn", "no_mlp", "linear_mlp"):
            bad = [i for i in getattr(self, name) if not 0 <= i < self.n_layers]
            if bad:
                raise InputError(f"{name} layer {bad[0]} is out of range; the model has layers 0..{self.n_layers - 1}")
        return self

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.block == "sequential":
            del d["block"]  # earlier runs' dicts stay as they were
        return d


Hook = Callable[[torch.Tensor, str], torch.Tensor | None]
HookSpec = Mapping[str, Hook | Sequence[Hook]]


class HookPoint(nn.Module):
    """A parameter-free identity module at one point of the forward (TransformerLens's `HookPoint`): calling it runs
    the hooks installed on it (`HookedModule.hooks`) in order, each as fn(x, name) with the point's name in the
    module tree; a hook may read the tensor or return a replacement. Cheap when none is installed."""

    def __init__(self) -> None:
        super().__init__()
        self.name = ""  # its name in the model's module tree, set by `HookedModule.name_hook_points`
        self.fns: list[Hook] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for fn in self.fns:
            out = fn(x, self.name)
            if out is not None:
                x = out
        return x


class FinalNormHook(nn.Module):
    """Parameter-free holder of the final norm's output point under TransformerLens's name, `ln_final.hook_normalized`
    (the norm itself stays `ln_f`, so the weights keep their state_dict keys)."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_normalized = HookPoint()


class HookedModule(nn.Module):
    """A model whose hook points are `HookPoint` submodules: their names in `named_modules()` are the points."""

    def name_hook_points(self) -> None:
        """Tell every `HookPoint` its name in the module tree (call at the end of `__init__`)."""
        for name, point in self.hook_modules().items():
            point.name = name

    def hook_modules(self) -> dict[str, HookPoint]:
        """{name: module} of the `HookPoint`s, in `named_modules()` order."""
        return {name: m for name, m in self.named_modules() if isinstance(m, HookPoint)}

    def hook_points(self) -> list[str]:
        """Names of the hook points this model offers: its `HookPoint` modules, found in the module tree."""
        return list(self.hook_modules())

    @contextmanager
    def hooks(self, spec: HookSpec | None) -> Iterator[None]:
        """Temporarily install `spec` ({hook point name: fn or [fns]}) after any hooks already installed; names are
        checked against `hook_points()`."""
        if not spec:
            yield
            return
        points = self.hook_modules()
        for name in spec:
            if name not in points:
                known = sorted(points)
                raise InputError(
                    f"unknown hook point {name!r}; known points look like {known[:4]} ... ({len(known)} in all)"
                )
        saved = {name: point.fns for name, point in points.items()}
        for name, fns in spec.items():
            points[name].fns = [*points[name].fns, *([fns] if callable(fns) else list(fns))]
        try:
            yield
        finally:
            for name, point in points.items():
                point.fns = saved[name]


class Attention(nn.Module):
    """Multi-head causal attention: explicit matmuls with hook points for the scores and pattern, or (softmax, T >=
    `FUSED_MIN_LEN`, no hook on either) PyTorch's fused causal kernel."""

    def __init__(self, cfg: ToyConfig, layer: int, model: ToyTransformer) -> None:
        super().__init__()
        self.H, self.dh = cfg.n_heads, cfg.d_model // cfg.n_heads
        self.kind = cfg.attn
        # hook points first: `named_modules()` lists them in this order (they hold no parameters)
        self.hook_q, self.hook_k, self.hook_v = (HookPoint() for _ in range(3))
        self.hook_attn_scores, self.hook_pattern, self.hook_z = (HookPoint() for _ in range(3))
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.o = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self._model = [model]  # a list so the parent is not registered as a submodule

    def head_output_weights(self) -> torch.Tensor:
        """W_O per head, [H, D, d]: W_O^h = o.weight[:, h·d:(h+1)·d]."""
        D = self.o.weight.shape[0]
        return self.o.weight.view(D, self.H, self.dh).permute(1, 0, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B,T,D] -> W_O z [B,T,D] (the block's `hook_attn_out` follows)."""
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.H, self.dh).unbind(2)  # each [B,T,H,d]
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        fused = self.kind == "softmax" and (T >= FUSED_MIN_LEN or x.is_cuda)  # CUDA: fused at every length
        if fused and not (self.hook_attn_scores.fns or self.hook_pattern.fns):
            z = self._fused(q, k, v)
        else:
            z = self._explicit(q, k, v)
        z = self.hook_z(z)
        return self.o(z.reshape(B, T, D))

    def _fused(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal softmax attention by PyTorch's fused kernel (no [B,H,T,T] tensor; the masked half is skipped),
        used when no hook reads the scores or the pattern. Same equation; sums in another order (issue 13)."""
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B,H,T,d]
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)  # [B,T,H,d]

    def _explicit(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The pattern spelled out with its hook points: scores, mask, softmax or ReLU/(i+1), then A V `[B,T,H,d]`."""
        T = q.shape[1]
        scores = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(self.dh)  # [B,H,T,T]
        scores = self.hook_attn_scores(scores)
        mask: torch.Tensor = self._model[0].causal_mask[:T, :T]  # type: ignore[index]
        if self.kind == "softmax":
            pattern = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        else:
            visible = torch.arange(1, T + 1, device=q.device, dtype=q.dtype).view(T, 1)
            pattern = F.relu(scores).masked_fill(~mask, 0.0) / visible
        pattern = self.hook_pattern(pattern)
        return torch.einsum("bhij,bjhd->bihd", pattern, v)  # [B,T,H,d]


class MLP(nn.Module):
    """W₂ ReLU(W₁ h), or a single D×D map when `linear`."""

    def __init__(self, cfg: ToyConfig, linear: bool) -> None:
        super().__init__()
        self.linear = linear
        if linear:
            self.w = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        else:
            self.w1 = nn.Linear(cfg.d_model, cfg.d_mlp, bias=False)
            self.w2 = nn.Linear(cfg.d_mlp, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # in place: the hidden pre-activation is a fresh tensor no backward needs (same values, one buffer less)
        return self.w(x) if self.linear else self.w2(F.relu(self.w1(x), inplace=True))


class Block(nn.Module):
    """Sequential (x += Attn(LN₁x); x += MLP(LN₂x)) or parallel (x += Attn(LN₁x) + MLP(LN₁x)) pre-LN block.
    In the parallel block `hook_resid_mid` is x + Attn(LN₁x) (the MLP output is added after it, from the same LN₁x)."""

    def __init__(self, cfg: ToyConfig, layer: int, model: ToyTransformer) -> None:
        super().__init__()
        self.layer = layer
        self.parallel = cfg.block == "parallel"
        # hook points registered in the order `named_modules()` lists them (they hold no parameters)
        self.hook_resid_pre, self.hook_resid_mid, self.hook_resid_post, self.hook_mlp_out = (
            HookPoint() for _ in range(4)
        )
        self.attn = None if layer in cfg.no_attn else Attention(cfg, layer, model)
        self.hook_attn_out = HookPoint()
        self.mlp = None if layer in cfg.no_mlp else MLP(cfg, layer in cfg.linear_mlp)
        ln1 = self.attn is not None or (self.parallel and self.mlp is not None)
        self.ln1 = nn.LayerNorm(cfg.d_model, eps=1e-5, bias=True) if ln1 else None
        ln2 = self.mlp is not None and not self.parallel
        self.ln2 = nn.LayerNorm(cfg.d_model, eps=1e-5, bias=True) if ln2 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B,T,D] -> [B,T,D]."""
        x = self.hook_resid_pre(x)
        h = self.ln1(x) if self.parallel and self.ln1 is not None else None
        if self.attn is not None:
            x = x + self.hook_attn_out(self.attn(self.ln1(x) if h is None else h))  # type: ignore[misc]
        x = self.hook_resid_mid(x)
        if self.mlp is not None:
            x = x + self.hook_mlp_out(self.mlp(self.ln2(x) if h is None else h))  # type: ignore[misc]
        return self.hook_resid_post(x)


class ToyTransformer(HookedModule):
    """The BB toy model. `forward(tokens [B,T]) -> logits [B,T,V]`; `with model.hooks({...}):` installs hooks."""

    def __init__(self, cfg: ToyConfig) -> None:
        super().__init__()
        self.cfg = cfg.validate()
        # the model-level hook points first, so `hook_points()` lists them before the blocks' (no parameters)
        self.hook_embed = HookPoint()
        self.ln_final = FinalNormHook()
        self.hook_logits = HookPoint()
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, layer, self) for layer in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self.register_buffer(
            "causal_mask", torch.tril(torch.ones(cfg.max_len, cfg.max_len, dtype=torch.bool)), persistent=False
        )
        self.name_hook_points()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 2:
            raise InputError(f"tokens must be [batch, positions]; got shape {tuple(tokens.shape)}")
        B, T = tokens.shape
        if T > self.cfg.max_len:
            raise InputError(f"sequence length {T} exceeds the model's {self.cfg.max_len} positions")
        x = self.embed(tokens) + self.pos.weight[:T]
        x = self.hook_embed(x)
        for block in self.blocks:
            x = block(x)
        x = self.ln_final.hook_normalized(self.ln_f(x))
        return self.hook_logits(self.unembed(x))
