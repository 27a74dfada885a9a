"""A small pre-LN transformer for the BB task (spec extreme-tokens §3), readable in one sitting.

x⁰_i = E[x_i] + P[i];  per block  x ← x + Attn(LN₁ x),  x ← x + MLP(LN₂ x);  logits = W_U LN_f(x).
The `parallel` block (R19) instead reads one normalised input for both: h = LN₁ x,  x ← x + Attn(h) + MLP(h).
Attention per head (d_h = d/H, no biases): s_ij = q_i·k_j/√d_h, and
  softmax: A_ij = exp(s_ij) / Σ_{j'≤i} exp(s_ij')
  relu:    A_ij = ReLU(s_ij) / (i+1)  for j ≤ i   (rows need not sum to 1 and may be all zero)
o_i = Σ_h W_O^h Σ_j A^h_ij v^h_j.

Hook points (tensor shapes; B batch, T positions, H heads, D = d_model, d = d_head):
  embed [B,T,D]; blocks.l.resid_pre [B,T,D]; blocks.l.attn.scores [B,H,T,T] (pre-mask);
  blocks.l.attn.pattern [B,H,T,T]; blocks.l.attn.v [B,T,H,d]; blocks.l.attn.z [B,T,H,d] (before W_O);
  blocks.l.attn.out [B,T,D]; blocks.l.resid_mid [B,T,D]; blocks.l.mlp.out [B,T,D]; blocks.l.resid_post [B,T,D];
  final_ln [B,T,D]; logits [B,T,V].
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


class HookedModule(nn.Module):
    """Named hook points in the style of TransformerLens: `self.hook(name, x)` runs the hooks installed for
    `name` (cheap when there are none); a hook may read the tensor or return a replacement."""

    def __init__(self) -> None:
        super().__init__()
        self._hooks: dict[str, list[Hook]] = {}

    def hook(self, name: str, x: torch.Tensor) -> torch.Tensor:
        fns = self._hooks.get(name)
        if not fns:
            return x
        for fn in fns:
            out = fn(x, name)
            if out is not None:
                x = out
        return x

    @contextmanager
    def hooks(self, spec: HookSpec | None) -> Iterator[None]:
        """Temporarily install `spec` ({hook point name: fn or [fns]}); names are checked against `hook_points()`."""
        if not spec:
            yield
            return
        known = set(self.hook_points())
        merged: dict[str, list[Hook]] = {k: list(v) for k, v in self._hooks.items()}
        for name, fns in spec.items():
            if name not in known:
                raise InputError(
                    f"unknown hook point {name!r}; known points look like {sorted(known)[:4]} ... ({len(known)} in all)"
                )
            merged.setdefault(name, []).extend([fns] if callable(fns) else list(fns))
        saved, self._hooks = self._hooks, merged
        try:
            yield
        finally:
            self._hooks = saved

    def hook_points(self) -> list[str]:
        """Names of the hook points this model offers (subclasses override)."""
        return []

    def hooked(self, *names: str) -> bool:
        """Whether a hook is installed on any of `names`."""
        return any(self._hooks.get(name) for name in names)


class Attention(nn.Module):
    """Multi-head causal attention: explicit matmuls with hook points for the scores and pattern, or (softmax, T >=
    `FUSED_MIN_LEN`, no hook on either) PyTorch's fused causal kernel."""

    def __init__(self, cfg: ToyConfig, layer: int, model: ToyTransformer) -> None:
        super().__init__()
        self.H, self.dh = cfg.n_heads, cfg.d_model // cfg.n_heads
        self.kind = cfg.attn
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.o = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.prefix = f"blocks.{layer}.attn."
        self._model = [model]  # a list so the parent is not registered as a submodule

    def head_output_weights(self) -> torch.Tensor:
        """W_O per head, [H, D, d]: W_O^h = o.weight[:, h·d:(h+1)·d]."""
        D = self.o.weight.shape[0]
        return self.o.weight.view(D, self.H, self.dh).permute(1, 0, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        model = self._model[0]
        hook = model.hook
        q, k, v = self.qkv(x).view(B, T, 3, self.H, self.dh).unbind(2)  # each [B,T,H,d]
        v = hook(self.prefix + "v", v)
        fused = self.kind == "softmax" and (T >= FUSED_MIN_LEN or x.is_cuda)  # CUDA: fused at every length
        if fused and not model.hooked(self.prefix + "scores", self.prefix + "pattern"):
            z = self._fused(q, k, v)
        else:
            z = self._explicit(q, k, v)
        z = hook(self.prefix + "z", z)
        return hook(self.prefix + "out", self.o(z.reshape(B, T, D)))

    def _fused(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal softmax attention by PyTorch's fused kernel (no [B,H,T,T] tensor; the masked half is skipped),
        used when no hook reads the scores or the pattern. Same equation; sums in another order (issue 13)."""
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B,H,T,d]
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)  # [B,T,H,d]

    def _explicit(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The pattern spelled out with its hook points: scores, mask, softmax or ReLU/(i+1), then A V `[B,T,H,d]`."""
        T = q.shape[1]
        hook = self._model[0].hook
        scores = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(self.dh)  # [B,H,T,T]
        scores = hook(self.prefix + "scores", scores)
        mask: torch.Tensor = self._model[0].causal_mask[:T, :T]  # type: ignore[index]
        if self.kind == "softmax":
            pattern = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        else:
            visible = torch.arange(1, T + 1, device=q.device, dtype=q.dtype).view(T, 1)
            pattern = F.relu(scores).masked_fill(~mask, 0.0) / visible
        pattern = hook(self.prefix + "pattern", pattern)
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
    In the parallel block `resid_mid` is x + Attn(LN₁x) (the MLP output is added after it, from the same LN₁x)."""

    def __init__(self, cfg: ToyConfig, layer: int, model: ToyTransformer) -> None:
        super().__init__()
        self.layer = layer
        self.parallel = cfg.block == "parallel"
        self.attn = None if layer in cfg.no_attn else Attention(cfg, layer, model)
        self.mlp = None if layer in cfg.no_mlp else MLP(cfg, layer in cfg.linear_mlp)
        ln1 = self.attn is not None or (self.parallel and self.mlp is not None)
        self.ln1 = nn.LayerNorm(cfg.d_model, eps=1e-5, bias=True) if ln1 else None
        ln2 = self.mlp is not None and not self.parallel
        self.ln2 = nn.LayerNorm(cfg.d_model, eps=1e-5, bias=True) if ln2 else None
        self._model = [model]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B,T,D] -> [B,T,D]."""
        hook, p = self._model[0].hook, f"blocks.{self.layer}."
        x = hook(p + "resid_pre", x)
        h = self.ln1(x) if self.parallel and self.ln1 is not None else None
        if self.attn is not None:
            x = x + self.attn(self.ln1(x) if h is None else h)  # type: ignore[misc]
        x = hook(p + "resid_mid", x)
        if self.mlp is not None:
            x = x + hook(p + "mlp.out", self.mlp(self.ln2(x) if h is None else h))  # type: ignore[misc]
        return hook(p + "resid_post", x)


class ToyTransformer(HookedModule):
    """The BB toy model. `forward(tokens [B,T]) -> logits [B,T,V]`; `with model.hooks({...}):` installs hooks."""

    def __init__(self, cfg: ToyConfig) -> None:
        super().__init__()
        self.cfg = cfg.validate()
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, layer, self) for layer in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self.register_buffer(
            "causal_mask", torch.tril(torch.ones(cfg.max_len, cfg.max_len, dtype=torch.bool)), persistent=False
        )

    def hook_points(self) -> list[str]:
        names = ["embed", "final_ln", "logits"]
        for layer in range(self.cfg.n_layers):
            p = f"blocks.{layer}."
            names += [p + s for s in ("resid_pre", "resid_mid", "resid_post", "mlp.out")]
            names += [p + "attn." + s for s in ("scores", "pattern", "v", "z", "out")]
        return names

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 2:
            raise InputError(f"tokens must be [batch, positions]; got shape {tuple(tokens.shape)}")
        B, T = tokens.shape
        if T > self.cfg.max_len:
            raise InputError(f"sequence length {T} exceeds the model's {self.cfg.max_len} positions")
        x = self.embed(tokens) + self.pos.weight[:T]
        x = self.hook("embed", x)
        for block in self.blocks:
            x = block(x)
        x = self.hook("final_ln", self.ln_f(x))
        return self.hook("logits", self.unembed(x))
