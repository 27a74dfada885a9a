"""Fake per-tensor activation quantisation of a causal LM, scoped to a `with` block (spec extreme-tokens §14, R23).

One tensor is one window's activations x [T, d] at one site (a batch [B, T, d] is quantised window by window, so
results do not depend on the batch size). Symmetric b-bit quantisation with q_max = 2^(b−1) − 1 (127 for int8):

    s = max |x_td| / q_max  (over the channels in the scale),   Q(x) = s · clamp(round(x / s), −q_max, q_max)

so |Q(x) − x| ≤ s/2 wherever |x| ≤ q_max·s. Outlier channels: c_d = max_t |x_td| (the channel peak); d is an
outlier when c_d > ratio × median_d c_d, at most `max_outliers` per tensor (largest peaks first). Policies:
"naive" (s from every channel), "exclude" (s without the outlier channels, which pass through unquantised, as in
LLM.int8()'s mixed-precision decomposition) and "clip" (s without them, and they are quantised with that s, i.e.
clamped to ±q_max·s). Sites: "linear" (the input of every Linear / GPT-2 Conv1D inside the decoder blocks; q/k/v
and gate/up read one tensor, quantised once and logged under the first module) and "residual" (the hidden state
entering each decoder block). Weights are never quantised. Hooks are removed when the block ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from attnlab.tracing.adapters.arch import Arch

TINY = 1e-30


def outlier_channels(x: torch.Tensor, ratio: float, max_outliers: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x [B,T,d] -> (outlier mask [B,d] bool, peak ratio c_d / median_d c_d [B,d]) per window (module docstring)."""
    peaks = x.detach().abs().float().amax(dim=-2)  # [B,d]
    med = peaks.median(dim=-1, keepdim=True).values.clamp_min(TINY)
    r = peaks / med
    top = r.topk(min(int(max_outliers), r.shape[-1]), dim=-1).indices
    in_top = torch.zeros_like(r, dtype=torch.bool).scatter_(-1, top, True)
    return (r > ratio) & in_top, r


def fake_quant(
    x: torch.Tensor, bits: int = 8, outliers: torch.Tensor | None = None, keep: bool = False
) -> torch.Tensor:
    """Q(x) per window: x [B,T,d]; outliers [B,d] bool channels left out of the scale (None: none); keep: those
    channels pass through unchanged ("exclude") instead of being clamped to the range ("clip")."""
    qmax = float(2 ** (int(bits) - 1) - 1)
    xf = x.float()
    a = xf.abs()
    if outliers is not None:
        a = a.masked_fill(outliers[:, None, :], 0.0)
    scale = a.amax(dim=(-2, -1), keepdim=True) / qmax  # [B,1,1]
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.clamp(torch.round(xf / scale), -qmax, qmax) * scale
    if keep and outliers is not None:
        q = torch.where(outliers[:, None, :], xf, q)
    return q.to(x.dtype)


@dataclass
class OutlierLog:
    """Outlier channels found in one `quantised` block: (layer, module) -> {channel: [windows flagged, max ratio]}."""

    found: dict[tuple[int, str], dict[int, list[float]]] = field(default_factory=dict)

    def add(self, layer: int, module: str, mask: torch.Tensor, ratio: torch.Tensor) -> None:
        """Count the channels of `mask` [B,d] with their peak ratios [B,d]."""
        entry = self.found.setdefault((layer, module), {})
        for b, d in mask.nonzero().tolist():
            n, r = entry.get(d, [0, 0.0])
            entry[d] = [n + 1, max(r, float(ratio[b, d]))]

    def rows(self) -> list[dict]:
        """One row per (layer, module, channel): windows flagged and the largest peak ratio seen."""
        return [
            {"layer": layer, "module": module, "channel": d, "windows": int(n), "max_ratio": r}
            for (layer, module), chans in sorted(self.found.items())
            for d, (n, r) in sorted(chans.items())
        ]


@dataclass
class QuantSpec:
    """What one `quantised` block does: policy (naive / exclude / clip), site, bits and the outlier rule."""

    policy: str
    site: str
    bits: int = 8
    ratio: float = 10.0
    max_outliers: int = 4


def quantise(x: torch.Tensor, spec: QuantSpec, log: OutlierLog, layer: int, module: str) -> torch.Tensor:
    """Q(x) of an activation x [..., d] under `spec`, logging the outlier channels it found."""
    shape = x.shape
    xb = x.reshape(shape[0] if x.dim() >= 3 else 1, -1, shape[-1])
    if spec.policy == "naive":
        return fake_quant(xb, spec.bits).reshape(shape)
    mask, ratio = outlier_channels(xb, spec.ratio, spec.max_outliers)
    log.add(layer, module, mask, ratio)
    return fake_quant(xb, spec.bits, mask, keep=spec.policy == "exclude").reshape(shape)


def _linear_modules(block: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name in the block, module) of every Linear or GPT-2 Conv1D inside one decoder block."""
    return [(n, m) for n, m in block.named_modules() if isinstance(m, nn.Linear) or type(m).__name__ == "Conv1D"]


def _linear_hook(spec: QuantSpec, log: OutlierLog, layer: int, name: str, memo: list) -> Callable[..., Any]:
    """Pre-hook replacing a Linear's input by Q(input); `memo` [input, output] reuses the result for the next
    module that reads the very same tensor (q/k/v, gate/up)."""

    def pre(mod: nn.Module, args: tuple) -> tuple:
        x = args[0]
        if memo and memo[0] is x:
            return (memo[1],) + tuple(args[1:])
        q = quantise(x, spec, log, layer, name)
        memo[:] = [x, q]
        return (q,) + tuple(args[1:])

    return pre


def _residual_hook(spec: QuantSpec, log: OutlierLog, layer: int) -> Callable[..., Any]:
    """Pre-hook (with kwargs) replacing the hidden state entering a block by Q(hidden state)."""

    def pre(mod: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if args:
            return (quantise(args[0], spec, log, layer, "residual"),) + tuple(args[1:]), kwargs
        kwargs = {**kwargs, "hidden_states": quantise(kwargs["hidden_states"], spec, log, layer, "residual")}
        return args, kwargs

    return pre


@contextlib.contextmanager
def quantised(arch: Arch, spec: QuantSpec) -> Iterator[OutlierLog]:
    """Within the block, forwards of the model behind `arch` see fake-quantised activations at `spec.site`; yields
    the log of outlier channels found. Every hook is removed on exit."""
    log = OutlierLog()
    memo: list = []  # the last quantised Linear input, shared by the modules that read it
    handles = []
    try:
        for layer, block in enumerate(arch.blocks):
            if spec.site == "residual":
                handles.append(block.register_forward_pre_hook(_residual_hook(spec, log, layer), with_kwargs=True))
                continue
            for name, mod in _linear_modules(block):
                handles.append(mod.register_forward_pre_hook(_linear_hook(spec, log, layer, name, memo)))
        yield log
    finally:
        for h in handles:
            h.remove()
        memo.clear()
