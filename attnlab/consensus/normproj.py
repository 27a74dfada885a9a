"""Normalisation as projection (consensus spec R13): the real pre-attention RMSNorm against its idealisation.

The real map of layer l is y = g_l * x / rms(x) with rms(x) = sqrt(mean_i x_i^2 + eps) and a learned gain
g_l [d]. Without eps, u = x / rms(x) = sqrt(d) x/|x| lies on the sphere of radius sqrt(d), so the map is a
projection onto a sphere followed by a coordinate-wise stretch. The idealisation replaces the stretch by a
translated, scaled sphere, y_hat = c_l + s_l u, with (c_l [d], s_l) fitted by least squares on the states that
reach layer l in one ordinary pass (fit on the even prompts, error measured on the odd ones):

    s = sum_t (y_t - y_bar).(u_t - u_bar) / sum_t |u_t - u_bar|^2,   c = y_bar - s u_bar.

The pre-attention norm of each block is the one architecture discovery finds (`Arch.input_norms`),
for every family; a model without one with a gain (post-norm blocks, OLMo's weightless LayerNorm) is refused.
The relative error of a token is |y - y_hat| / |y|. The consensus question is then asked twice: iterate the
stack (periodic, as `consensus model`) with the real norms and with the idealised ones, and compare the fall of
mean log10 E_first from pass 1 to the last pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnlab.consensus.realmodel import StackRunner
from attnlab.errors import InputError


@dataclass
class SphereNorm:
    """y = c + s x / rms(x) for x [..., d] (c [d], s scalar; `eps` as in the real RMSNorm)."""

    c: torch.Tensor
    s: float
    eps: float = 1e-5

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        u = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.c.to(x.dtype) + self.s * u).to(x.dtype)


def rms_unit(x: torch.Tensor, eps: float) -> torch.Tensor:
    """u = x / sqrt(mean x^2 + eps): [..., d] -> [..., d] (on the sphere of radius sqrt(d) when eps = 0)."""
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def fit_sphere(x: torch.Tensor, y: torch.Tensor, eps: float) -> SphereNorm:
    """Least-squares (c, s) of y ~ c + s u(x) over tokens: x, y [n, d] float64."""
    u = rms_unit(x, eps)
    ub, yb = u.mean(0), y.mean(0)
    du, dy = u - ub, y - yb
    s = float((dy * du).sum() / (du * du).sum().clamp_min(1e-300))
    return SphereNorm(yb - s * ub, s, eps)


def relative_error(y: torch.Tensor, y_hat: torch.Tensor) -> torch.Tensor:
    """|y - y_hat| / |y| per token: [n, d] -> [n]."""
    return (y - y_hat).norm(dim=-1) / y.norm(dim=-1).clamp_min(1e-300)


def norm_eps(norm: Any) -> float:
    """The eps of an HF RMSNorm module (`variance_epsilon` or `eps`)."""
    return float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))


def check_input_norms(runner: StackRunner) -> None:
    """Refuse (one-line `InputError`) a model whose blocks lack a pre-attention norm with a learned gain [d]."""
    for i, layer in enumerate(runner.layers):
        w = getattr(runner.input_norm(layer), "weight", None)
        if not isinstance(w, torch.Tensor) or w.ndim != 1:
            what = "no pre-attention norm" if runner.input_norm(layer) is None else "a norm without a learned gain"
            raise InputError(f"{runner.arch.model_type}: block {i} has {what}; consensus norm needs one with a gain")


def layer_inputs(runner: StackRunner, ids: torch.Tensor) -> list[torch.Tensor]:
    """The residual state entering each layer in one ordinary pass (MLPs on): L tensors [batch, T, d]."""
    with torch.no_grad():
        h, ctx = runner.prepare(ids)
        out = []
        for layer in runner.layers:
            out.append(h)
            h = runner.layer_step(layer, h, ctx, True)
    return out


def fit_layers(runner: StackRunner, ids: torch.Tensor) -> tuple[list[SphereNorm], dict[str, list[float]]]:
    """Fit each layer's sphere on the even prompts, measure it on the odd ones (float64). Returns (norms, errors)
    with errors `rel_error_mean`, `rel_error_p90`, `rel_error_gain_mean` (c = 0, s = mean gain) per layer and
    `gain_cv` (std/mean of |g|)."""
    norms: list[SphereNorm] = []
    err: dict[str, list[float]] = {"rel_error_mean": [], "rel_error_p90": [], "rel_error_gain_mean": [], "gain_cv": []}
    check_input_norms(runner)
    for layer, h in zip(runner.layers, layer_inputs(runner, ids)):
        ln = runner.input_norm(layer)
        eps = norm_eps(ln)
        with torch.no_grad():
            y = ln(h).double()
        x = h.double()
        fit_x, fit_y = x[0::2].reshape(-1, x.shape[-1]), y[0::2].reshape(-1, x.shape[-1])
        ev_x, ev_y = x[1::2].reshape(-1, x.shape[-1]), y[1::2].reshape(-1, x.shape[-1])
        sn = fit_sphere(fit_x, fit_y, eps)
        r = relative_error(ev_y, sn(ev_x))
        g = ln.weight.detach().double()
        plain = SphereNorm(torch.zeros_like(g), float(g.mean()), eps)
        norms.append(sn)
        err["rel_error_mean"].append(float(r.mean()))
        err["rel_error_p90"].append(float(torch.quantile(r, 0.9)))
        err["rel_error_gain_mean"].append(float(relative_error(ev_y, plain(ev_x)).mean()))
        err["gain_cv"].append(float(g.abs().std() / g.abs().mean()))
    return norms, err


class SphereRunner(StackRunner):
    """A `StackRunner` whose pre-attention norm of layer i is the fitted `SphereNorm` (the model is not changed)."""

    def __init__(self, model: Any, norms: list[SphereNorm]) -> None:
        super().__init__(model)
        self.sphere = {id(layer): n for layer, n in zip(self.layers, norms)}

    def norm_map(self, layer: Any) -> Any:
        """c + s u(x) of the input norm's input x `[batch, T, d]` in place of block `layer`'s pre-attention norm
        (`StackRunner.layer_step` runs the block's own attention, residual adds and MLP otherwise)."""
        return self.sphere.get(id(layer))


def consensus_curves(
    model: Any, norms: list[SphereNorm], ids: torch.Tensor, passes: int, mlp: bool
) -> dict[str, np.ndarray]:
    """E_first `[prompt, passes*L+1]` of the periodic iteration with the real and with the idealised norms."""
    from attnlab.consensus.realmodel import iterate_stack

    out = {}
    for name, runner in (("real", StackRunner(model)), ("ideal", SphereRunner(model, norms))):
        res = iterate_stack(runner, ids, "periodic", passes, mlp, depth_view=False)
        out[name] = res.curves["E_first"]
    return out


def norm_metrics(err: dict[str, list[float]], curves: dict[str, np.ndarray], L: int, passes: int, fall: float) -> dict:
    """metrics.json of `consensus norm`: per-layer errors, the falls of mean log10 E_first (real, idealised) and
    whether both reach the same conclusion (both fall by more than `fall` decades, or neither does)."""
    from attnlab.consensus.modelrun import fall_stats

    st = {k: fall_stats(v, L) for k, v in curves.items()}
    fr, fi = st["real"]["fall_pass1_to_last"], st["ideal"]["fall_pass1_to_last"]
    return {
        **err,
        "rel_error_max_layer": int(np.argmax(err["rel_error_mean"])),
        "fall_real": fr,
        "fall_ideal": fi,
        "fall_ci95_real": st["real"]["fall_ci95"],
        "fall_ci95_ideal": st["ideal"]["fall_ci95"],
        "fall_threshold": fall,
        "same_conclusion": bool((fr > fall) == (fi > fall)),
        "passes": passes,
        "n_layers": L,
    }
