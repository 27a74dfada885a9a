"""Figures of the theory run (spec §9.4 plots and §9.5 m(t) under Adam vs SGD); each returns the PNG path."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnlab.extreme.theory.flow import Trajectory
from attnlab.plotting import new_figure, save_figure


def _log_indices(n: int, count: int = 400) -> np.ndarray:
    """About `count` distinct log-spaced indices in [1, n − 1] (for drawing long step series on a log axis)."""
    return np.unique(np.geomspace(1, n - 1, count).astype(int))


def plot_alpha(traj: Trajectory, single: Trajectory | None, path: Path) -> Path:
    """α_v against log t (log-x axis) with a ½ log t guide through the last point of the mean α; optional
    single-n control (dashed) that stalls at a finite value."""
    fig, axes = new_figure(1, 1, width=6.0, height=4.2)
    ax = axes[0, 0]
    sel = traj.t > 0
    t = traj.t[sel]
    for v in range(traj.alpha.shape[1]):
        ax.plot(t, traj.alpha[sel, v], label=f"α_{v + 1} (n ∈ 1..10)")
    anchor = float(traj.alpha[-1].mean())
    guide = anchor + 0.5 * (np.log(t) - np.log(t[-1]))
    late = t >= 1e2
    ax.plot(t[late], guide[late], "k:", lw=1.5, label="½ log t guide")
    if single is not None:
        s_sel = single.t > 0
        ax.plot(single.t[s_sel], single.alpha[s_sel, 0], "--", color="grey", label="single n = 5 (converges)")
    ax.set_xscale("log")
    ax.set_xlabel("t (gradient-flow time)")
    ax.set_ylabel("sink logit α_v")
    ax.set_title("Sink logits grow like ½ log t (§9.3)")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_beta_loss(traj: Trajectory, path: Path) -> Path:
    """‖β − mean β‖ and ℓ on log-log axes, with t^{−1/2} and t^{−1} guides anchored at the last point."""
    fig, axes = new_figure(2, 1, width=4.8, height=3.8)
    sel = traj.t > 0
    t = traj.t[sel]
    late = t >= 1e3
    for ax, y, slope, name in [(axes[0, 0], traj.beta_spread[sel], -0.5, "‖β − mean β‖"),
                               (axes[0, 1], traj.loss[sel], -1.0, "ℓ(α, β)")]:
        ax.loglog(t, y, label=name)
        ax.loglog(t[late], y[-1] * (t[late] / t[-1]) ** slope, "k:", label=f"t^{slope:g} guide")
        ax.set_xlabel("t")
        ax.set_ylabel(name)
        ax.legend(fontsize=8)
    axes[0, 0].set_title("Value drain: β flattens")
    axes[0, 1].set_title("Loss decays like 1/t")
    return save_figure(fig, path)


def plot_residual(reduced: dict[str, np.ndarray], closed_form: np.ndarray, two_param: dict[str, dict],
                  lrs: np.ndarray, path: Path) -> Path:
    """m(t) under Adam vs SGD: left the reduced recursion (with the SGD closed form), right the two-parameter
    model at each learning rate (m/m₀)."""
    fig, axes = new_figure(2, 1, width=5.0, height=3.9)
    ax = axes[0, 0]
    idx = _log_indices(reduced["adam"].size)
    ax.plot(idx, reduced["adam"][idx], label="Adam")
    ax.plot(idx, reduced["sgd"][idx], label="SGD")
    ax.plot(idx, closed_form[idx], "k:", label="SGD closed form")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("step t")
    ax.set_ylabel("residual norm m")
    ax.set_title("Reduced recursion g = −log t/(m³t), lr 0.3")
    ax.legend(fontsize=8)
    ax = axes[0, 1]
    colors = ["C0", "C1", "C2", "C3", "C4", "C5"]
    for j, lr in enumerate(lrs):
        col = colors[j % len(colors)]
        for opt, style in (("adam", "-"), ("sgd", "--")):
            m = two_param[opt]["m"][:, j]
            idx = _log_indices(m.size)
            ax.plot(idx, m[idx] / m[0], style, color=col, label=f"{opt} lr {lr:g}")
    ax.set_xscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("m / m₀")
    ax.set_title("Two-parameter model L = exp(−y·a(m))")
    ax.legend(fontsize=7, ncol=2)
    return save_figure(fig, path)
