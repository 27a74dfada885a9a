"""Fake per-tensor activation quantisation of a causal LM at named hook points (spec extreme-tokens §14, R23).

One tensor is one window's activations x [T, d] at one site (a batch [B, T, d] is quantised window by window, so
results do not depend on the batch size). Symmetric b-bit quantisation with q_max = 2^(b−1) − 1 (127 for int8):

    s = max |x_td| / q_max  (over the channels in the scale),   Q(x) = s · clamp(round(x / s), −q_max, q_max)

so |Q(x) − x| ≤ s/2 wherever |x| ≤ q_max·s. Outlier channels: c_d = max_t |x_td| (the channel peak); d is an
outlier when c_d > ratio × median_d c_d, at most `max_outliers` per tensor (largest peaks first). Policies:
"naive" (s from every channel), "exclude" (s without the outlier channels, which pass through unquantised, as in
LLM.int8()'s mixed-precision decomposition) and "clip" (s without them, and they are quantised with that s, i.e.
clamped to ±q_max·s). Sites, as named hook points of the HF trace adapter (`quant_hooks`, run inside
`traced(model, hooks=...)`): "linear" (`blocks.{l}.{path}.hook_in`, the input of every Linear / GPT-2 Conv1D inside
the decoder blocks; q/k/v and gate/up read one tensor, quantised once and logged under the first module) and
"residual" (`blocks.{l}.hook_resid_pre`, the hidden state entering each decoder block). Weights are never quantised.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from attnlab.tracing.adapters.arch import Arch
from attnlab.tracing.adapters.linear_inputs import linear_input_points

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
    """Outlier channels found under one condition: (layer, module) -> {channel: [windows flagged, max ratio]}."""

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
    """What one quantised condition does: policy (naive / exclude / clip), site, bits and the outlier rule."""

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


HookFn = Callable[[torch.Tensor, str], torch.Tensor]


def _quantiser(spec: QuantSpec, log: OutlierLog, layer: int, module: str, memo: list | None) -> HookFn:
    """A hook replacing the activation x [..., d] at its point by Q(x); `memo` [input, output] (None: none) reuses
    the result when the next point is handed the very same tensor (q/k/v, gate/up)."""

    def fn(x: torch.Tensor, point: str) -> torch.Tensor:
        if memo is not None and memo and memo[0] is x:
            return memo[1]
        q = quantise(x, spec, log, layer, module)
        if memo is not None:
            memo[:] = [x, q]
        return q

    return fn


def quant_hooks(arch: Arch, spec: QuantSpec, log: OutlierLog) -> dict[str, HookFn]:
    """{named hook point: quantiser} for `spec.site`, to pass as `traced(model, hooks=...)`: "residual" at
    `blocks.{l}.hook_resid_pre` (logged as module "residual"), "linear" at every `blocks.{l}.{path}.hook_in`
    (logged under the path; a tensor read by several layers is quantised once, logged under the first)."""
    if spec.site == "residual":
        return {f"blocks.{l}.hook_resid_pre": _quantiser(spec, log, l, "residual", None) for l in range(arch.n_layers)}
    memo: list = []  # the last quantised linear input, shared by the layers that read it
    return {
        point: _quantiser(spec, log, layer, path, memo) for point, (layer, path) in linear_input_points(arch).items()
    }
