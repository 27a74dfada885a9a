"""Every figure of the attention-paths study (spec §11, §16), PNG and interactive alike, drawn from saved arrays.

PNG: U heatmaps, accuracy vs alpha, alignment, solver trace, head scores vs pruning drops, progressive pruning,
the gradient-descent ensemble's U and loss curves (S7) and the L = 3 off-diagonal fraction (S6); they are
`matplotlib.figure.Figure`s saved through `attnlab.reports.plotting` (no pyplot). Interactive: plotly figure dicts
(`attnlab.reports.page`'s builders) of U, U per width, accuracy against N and the path kernels. The drawing functions
take arrays; `solve_figures`, `sweep_figures`, `sample_figures`, `prune_figures` and `ensemble_figures` read a run
folder's saved files and write its PNGs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from attnlab.reports.page import heatmap, lines, rounded, with_slider
from attnlab.reports.plotting import new_figure, save_figure
from attnlab.runs import RunDir, read_json, read_jsonl

MAX_KERNEL_P = 200  # training points shown in a kernel heat map (the first ones), to keep pages small


def u_heatmaps(
    path: Path, U_theory: np.ndarray, names: list[str], U_sampled: np.ndarray | None = None, title: str = ""
) -> Path:
    """theory | sampled | difference on one symmetric colour scale, axes labelled with path names."""
    mats = [("theory", U_theory)] + (
        [("sampled", U_sampled), ("sampled - theory", U_sampled - U_theory)] if U_sampled is not None else []
    )
    return labelled_heatmaps(path, mats, names, title)


def accuracy_vs_alpha(path: Path, records: list[dict], sampled: list[dict] | None = None) -> Path:
    """Renormalised theory accuracy vs alpha (log axis), GP baselines as horizontal lines, sampled points."""
    fig, axes = new_figure(1, 1, 5.5, 3.8)
    ax = axes[0, 0]
    recs = sorted(records, key=lambda r: r["alpha"])
    ax.plot([r["alpha"] for r in recs], [100 * r["accuracy"] for r in recs], "o-", label="renormalised theory")
    styles = iter(["--", ":", "-."])
    for key in [k for k in recs[0] if k.startswith("accuracy_gp")]:
        ax.axhline(
            100 * recs[0][key],
            ls=next(styles, "--"),
            color="gray",
            label=key.replace("accuracy_gp", "GP").replace("_", " ") or "GP",
        )
    if sampled:
        ax.errorbar(
            [s["alpha"] for s in sampled],
            [100 * s["accuracy"] for s in sampled],
            yerr=[100 * s.get("accuracy_err", 0.0) for s in sampled],
            fmt="s",
            color="C3",
            label="sampled",
        )
    ax.set_xscale("log")
    ax.set_xlabel("alpha = P / N")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def kernel_alignment(path: Path, align: dict) -> Path:
    """overlap_i of the top PCs for the renormalised vs GP kernel, with the captured fraction c_k as an inset."""
    fig, axes = new_figure(1, 1, 5.5, 3.8)
    ax = axes[0, 0]
    for name, a in align.items():
        ax.plot(np.arange(1, len(a["overlap"]) + 1), a["overlap"], "o-", ms=3, label=name)
    ax.set_xlabel("principal component i (descending eigenvalue)")
    ax.set_ylabel("|v_i . Y| / sqrt(P)")
    ax.legend(fontsize=8)
    ins = ax.inset_axes([0.55, 0.4, 0.4, 0.35])
    for a in align.values():
        ins.plot(np.arange(1, len(a["captured"]) + 1), a["captured"])
    ins.set_title("c_k", fontsize=7)
    ins.tick_params(labelsize=6)
    return save_figure(fig, path)


def solver_trace(path: Path, trace: list[dict]) -> Path:
    """max|dS/dU| per iteration (log scale), marking the phase."""
    fig, axes = new_figure(1, 1, 5.0, 3.4)
    ax = axes[0, 0]
    for phase in dict.fromkeys(t["phase"] for t in trace):
        pts = [(t["it"], t["max_grad"]) for t in trace if t["phase"] == phase]
        ax.semilogy(*zip(*pts), "o-", ms=3, label=phase)
    ax.set_xlabel("iteration")
    ax.set_ylabel("max |dS/dU|")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def head_scores(path: Path, names: list[str], scores: np.ndarray, drops: np.ndarray, rho: float) -> Path:
    """Ascending head scores beside the GD accuracy drops in the same order."""
    order = np.argsort(scores)
    fig, axes = new_figure(2, 1, 4.5, 3.4)
    axes[0, 0].bar(range(len(order)), np.asarray(scores)[order])
    axes[0, 1].bar(range(len(order)), 100 * np.asarray(drops)[order], color="C1")
    for ax, lab in zip(axes[0], ["head score (theory U)", "accuracy drop when pruned (points)"]):
        ax.set_xticks(range(len(order)), [names[i] for i in order], rotation=60, fontsize=7)
        ax.set_ylabel(lab)
    fig.suptitle(f"Spearman rho = {rho:.2f}")
    return save_figure(fig, path)


def progressive(path: Path, curves: dict[str, list[float]]) -> Path:
    """Accuracy after removing k heads, per order."""
    fig, axes = new_figure(1, 1, 5.0, 3.6)
    ax = axes[0, 0]
    for name, c in curves.items():
        ax.plot(
            range(len(c)),
            100 * np.asarray(c),
            "o-" if not name.startswith("random") else ":",
            color=None if not name.startswith("random") else "gray",
            label=name if "random 0" in name or not name.startswith("random") else None,
        )
    ax.set_xlabel("heads removed")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


# --- one run folder's figures ----------------------------------------------------------------------------------
def fmt_N(N: float | str | None) -> str:
    """A width for file names and titles: 10, 0.5, inf."""
    return "inf" if N in ("inf", None) or math.isinf(float(N)) else f"{float(N):g}"  # type: ignore[arg-type]


def _alignment(run: RunDir) -> dict:
    return {name: {k: np.asarray(v) for k, v in a.items()} for name, a in run.read_json("alignment.json").items()}


def solve_figures(path: Path) -> list[Path]:
    """U heatmap, solver trace and kernel alignment of a `paths solve` folder."""
    run = RunDir(path)
    m, names = run.read_json("metrics.json"), run.read_json("paths.json")["path_names"]
    trace = run.read_json("saddle_point.json")["trace"]
    out = [u_heatmaps(run.figure_path(f"U_heatmap_N{fmt_N(m['N'])}"), np.load(run.file("U.npy")), names,
                      title=f"U at N = {fmt_N(m['N'])}")]  # fmt: skip
    if trace:
        out.append(solver_trace(run.figure_path("solver_trace"), trace))
    out.append(kernel_alignment(run.figure_path("kernel_alignment"), _alignment(run)))
    return out


def sweep_figures(path: Path) -> list[tuple[Path, str]]:
    """Accuracy vs alpha, U heatmap at the smallest N and its kernel alignment of a `paths sweep` folder."""
    run = RunDir(path)
    recs, names = read_jsonl(run.file("points.jsonl")), run.read_json("paths.json")["path_names"]
    last = recs[-1]
    return [
        (accuracy_vs_alpha(run.figure_path("accuracy_vs_alpha"), recs), "accuracy vs alpha"),
        (u_heatmaps(run.figure_path(f"U_heatmap_N{fmt_N(last['N'])}"), np.asarray(last["U"]), names),
         f"U at N = {fmt_N(last['N'])}"),
        (kernel_alignment(run.figure_path("kernel_alignment"), _alignment(run)),
         f"kernel-task alignment at N = {fmt_N(last['N'])}"),
    ]  # fmt: skip


def sample_figures(path: Path) -> list[Path]:
    """Theory vs sampled U heatmaps of a `paths sample` folder."""
    run = RunDir(path)
    m, names, config = run.read_json("metrics.json"), run.read_json("paths.json")["path_names"], run.read_config()
    N = fmt_N(m["N"])
    U, U_hat = np.load(run.file("U.npy")), np.load(run.file("U_hat.npy"))
    title = f"{config['entropy_form']} theory vs sampled, N = {N}"
    return [u_heatmaps(run.figure_path(f"U_heatmap_N{N}"), U, names, U_hat, title)]


def prune_figures(path: Path) -> list[Path]:
    """Head scores beside GD pruning drops, and progressive pruning curves, of a `paths prune` folder."""
    run = RunDir(path)
    m = run.read_json("metrics.json")
    scores, drops = np.asarray(m["score"]), np.asarray(m["acc_drop"])
    return [head_scores(run.figure_path("head_scores"), m["heads"], scores, drops, m["spearman_rho"]),
            progressive(run.figure_path("progressive_pruning"), m["progressive"])]  # fmt: skip


def ensemble_figures(path: Path) -> list[Path]:
    """theory U | U_GD | difference, and the loss curves, of a `paths ensemble` folder (S7)."""
    run = RunDir(path)
    m, names = run.read_json("metrics.json"), run.read_json("paths.json")["path_names"]
    U, U_gd = np.load(run.file("U.npy")), np.load(run.file("U_gd.npy"))
    mats = [("theory U", U), ("U_GD (ensemble mean)", U_gd), ("U_GD - U", U_gd - U)]
    return [labelled_heatmaps(run.figure_path("U_theory_vs_gd"), mats, names, "theory vs gradient descent"),
            loss_curves(run.figure_path("gd_loss"), np.load(run.file("loss_curve.npy")), m["steps"])]  # fmt: skip


# --- the claims experiments (spec §16) -------------------------------------------------------------------------
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


def labelled_heatmaps(path: Path, mats: list[tuple[str, np.ndarray]], names: list[str], title: str = "") -> Path:
    """Panels of U-like matrices on one symmetric colour scale, axes labelled with path names (values written in
    the cells for up to 6 paths)."""
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
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)


def layers_figure(out: Path) -> Path:
    """S6: the off-diagonal fraction of U against alpha, with the sampled point, from `out/S6.json` (written by
    `repro.verdicts.run_S6` from its `sweep/` and `sample/` runs)."""
    s6 = read_json(out / "S6.json")
    fig, ax = new_figure(width=5.0)
    a = ax[0, 0]
    a.plot(s6["alpha"], s6["offdiag_fraction"], "o-", label="theory (chain)")
    if s6.get("sampled") is not None:
        sampled = s6["sampled"]
        a.plot([sampled["alpha"]], [sampled["offdiag_fraction"]], "s", color="C3",
               label=f"sampled (HMC, N={sampled['N']:g})")  # fmt: skip
    a.set_xscale("log")
    a.set_xlabel("alpha = P / N")
    a.set_ylabel("|U - diag U| / |U|")
    a.set_title("S6: L = 3, H = 2 (8 paths), digit episodes")
    a.legend()
    return save_figure(fig, out / "S6.png")


# --- interactive figures (plotly figure dicts for report.html) ------------------------------------------------
def u_figure(U: np.ndarray, names: list[str], title: str) -> dict:
    """U [paths, paths] as a heat map on a symmetric scale, axes labelled with the path names."""
    vmax = float(np.abs(U).max()) or 1.0
    hover = "%{y} × %{x}<br>U %{z:.4g}<extra></extra>"
    return heatmap(U, title, names, names, colorscale="RdBu", zmin=-vmax, zmax=vmax,
                   hovertemplate=hover)  # fmt: skip


def u_slider_figure(recs: list[dict], names: list[str]) -> dict:
    """U at every width of a sweep, one slider step per N (the points as run: large to small N)."""
    mats = [np.asarray(r["U"], dtype=np.float64) for r in recs]
    vmax = max(float(np.abs(m).max()) for m in mats) or 1.0
    fig = u_figure(mats[-1], names, "U per width (slider: N)")
    fig["data"][0].update(zmin=-vmax, zmax=vmax)
    labels = [fmt_N(r["N"]) for r in recs]
    return with_slider(fig, [[{"z": rounded(m)}] for m in mats], labels, "N = ", traces=[0])


def accuracy_figure(recs: list[dict]) -> dict:
    """Test accuracy against the width N (log axis): renormalised theory, its two U ablations and GP baselines."""
    recs = sorted(recs, key=lambda r: float(r["N"]))
    N = [float(r["N"]) for r in recs]
    keys = ["accuracy", "accuracy_diagonal_only", "accuracy_equalised_diagonal"]
    keys += [k for k in recs[0] if k.startswith("accuracy_gp")]
    series = {k: (N, [r.get(k, np.nan) for r in recs]) for k in keys if k in recs[0]}
    return lines(series, "Test accuracy against N", "N (width)", "accuracy", xaxis={"type": "log"})


def kernel_figure(run: RunDir, names: list[str]) -> dict | None:
    """The renormalised kernel K(U) = Σ U C (the run's `K_train.npy` [P, P], spec K2) and each path's own kernel
    C_pp (`kernels.npz` C_train [paths, paths, P, P]) on the first `MAX_KERNEL_P` training points; a menu picks the
    kernel. None when the run saved no kernels (multi-output and plug-in solves)."""
    if not run.file("kernels.npz").is_file():
        return None
    with np.load(run.file("kernels.npz"), allow_pickle=False) as z:
        C = np.asarray(z["C_train"])[:, :, :MAX_KERNEL_P, :MAX_KERNEL_P]
    mats = {}
    if run.file("K_train.npy").is_file():  # runs before K_train.npy was saved show the path kernels only
        mats["renormalised Σ U C"] = np.load(run.file("K_train.npy"))[:MAX_KERNEL_P, :MAX_KERNEL_P]
    mats.update({f"C[{n}, {n}]": C[i, i] for i, n in enumerate(names)})
    first = next(iter(mats))
    fig = heatmap(mats[first], first, hovertemplate="μ %{y}, ν %{x}<br>%{z:.4g}<extra></extra>")
    buttons = [{"label": k, "method": "update", "args": [{"z": [rounded(m)]}, {"title.text": k}]}
               for k, m in mats.items()]  # fmt: skip
    fig["layout"]["updatemenus"] = [{"buttons": buttons, "x": 0, "y": 1.15, "xanchor": "left"}]
    fig["layout"]["margin"] = {"t": 80}
    return fig
