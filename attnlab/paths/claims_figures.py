"""Figures and reports of the claims commands (spec §16): `paths ensemble` (S7), the L = 3 experiment (S6) and
the plugged-in attention (S10). They read saved files only."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnlab.plotting import new_figure, save_figure
from attnlab.report import Report
from attnlab.runs import RunDir, read_jsonl


def loss_curves(path: Path, curves: np.ndarray, steps: int) -> Path:
    """Negative log posterior of every gradient-descent run against the step; curves [runs, records]."""
    fig, ax = new_figure(width=5.0)
    a = ax[0, 0]
    x = np.linspace(0, steps, curves.shape[1])
    for c in curves:
        a.plot(x, c, color="C0", alpha=0.4, lw=0.8)
    a.set_yscale("log")
    a.set_xlabel("Adam step")
    a.set_ylabel("-log posterior")
    a.set_title(f"{curves.shape[0]} gradient-descent runs")
    return save_figure(fig, path)


def labelled_heatmaps(path: Path, mats: list[tuple[str, np.ndarray]], names: list[str], title: str) -> Path:
    """Panels of U-like matrices on one symmetric colour scale, axes labelled with path names."""
    vmax = max(float(np.abs(m).max()) for _, m in mats) or 1.0
    fig, axes = new_figure(len(mats), 1, 4.2, 3.8)
    ims = []
    for ax, (name, m) in zip(axes[0], mats):
        ims.append(ax.imshow(m, cmap="RdBu_r", vmin=-vmax, vmax=vmax))
        ax.set_xticks(range(len(names)), names, rotation=60, fontsize=7)
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.set_title(name)
        if len(names) <= 6:
            for (i, j), v in np.ndenumerate(m):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7)
    fig.colorbar(ims[-1], ax=axes[0, -1], shrink=0.8)
    fig.suptitle(title)
    return save_figure(fig, path)


def ensemble_report(path: Path) -> Report:
    """`paths ensemble`: U theory | U_GD | difference, the loss curves and the comparison table."""
    run = RunDir(path)
    m, names = run.read_json("metrics.json"), run.read_json("paths.json")["path_names"]
    rep = Report(f"attention paths: gradient-descent ensemble (N={m['N']:g}, T={m['T']:g}, {m['runs']} runs)")
    rep.table([{k: m[k] for k in ("rel_frob_err_gd", "run_spread", "accuracy_U_gd", "train_mse_max", "gd_wall_s")}
               | {"theory_accuracy": m["theory"]["accuracy"], "gp_accuracy": m["theory"]["accuracy_gp"]}])  # fmt: skip
    U, U_gd = np.load(run.file("U.npy")), np.load(run.file("U_gd.npy"))
    mats = [("theory U", U), ("U_GD (ensemble mean)", U_gd), ("U_GD - U", U_gd - U)]
    rep.figure(labelled_heatmaps(run.figure_path("U_theory_vs_gd"), mats, names, "theory vs gradient descent"))
    rep.figure(loss_curves(run.figure_path("gd_loss"), np.load(run.file("loss_curve.npy")), m["steps"]))
    rep.write(run.file("report.html"))
    return rep


def offdiag_fraction(U: np.ndarray) -> float:
    """|U - diag U|_F / |U|_F: 0 for a diagonal U (no cross-path structure)."""
    return float(np.linalg.norm(U - np.diag(np.diag(U))) / np.linalg.norm(U))


def layers_figure(out: Path) -> Path:
    """S6: the off-diagonal fraction of U against alpha (the `sweep/` run), with the sampled point (`sample/`)."""
    recs = read_jsonl(out / "sweep" / "points.jsonl")
    fig, ax = new_figure(width=5.0)
    a = ax[0, 0]
    alpha = [r["alpha"] for r in recs]
    a.plot(alpha, [offdiag_fraction(np.asarray(r["U"])) for r in recs], "o-", label="theory (chain)")
    if (out / "sample" / "U_hat.npy").is_file():
        m = RunDir(out / "sample").read_json("metrics.json")
        a.plot([m["alpha"]], [offdiag_fraction(np.load(out / "sample" / "U_hat.npy"))], "s", color="C3",
               label=f"sampled (HMC, N={m['N']:g})")  # fmt: skip
    a.set_xscale("log")
    a.set_xlabel("alpha = P / N")
    a.set_ylabel("|U - diag U| / |U|")
    a.set_title("S6: L = 3, H = 2 (8 paths), digit episodes")
    a.legend()
    return save_figure(fig, out / "S6.png")
