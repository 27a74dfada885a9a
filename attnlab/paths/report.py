"""Reports of `attnlab paths` runs, built from the run folder alone (saved metrics, arrays and path names; never
recomputed). Each `*_report(path)` draws the figures, writes `report.html` and returns the `Report`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnlab.paths import figures
from attnlab.report import Report, element_id, heatmap, lines, rounded, with_slider
from attnlab.runs import RunDir, read_jsonl

SOLVE_COLUMNS = ("N", "T", "alpha", "entropy_form", "converged", "iterations", "max_grad", "hessian_min_eig",
                 "action", "accuracy", "accuracy_gp", "wall_s")  # fmt: skip
SWEEP_COLUMNS = ("N", "alpha", "converged", "iterations", "max_grad", "hessian_min_eig", "accuracy",
                 "accuracy_diagonal_only", "accuracy_equalised_diagonal")  # fmt: skip
SAMPLE_COLUMNS = ("N", "alpha", "sampler", "rhat_max", "ess_bulk_min", "accept_mean", "divergences", "ebfmi_min",
                  "rel_frob_err", "sampled_accuracy", "wall_s", "converged")  # fmt: skip


def _not_available(value: object) -> object:
    """A statistic saved as null (undefined, e.g. R-hat from too few draws) reads 'n/a' in a table."""
    return "n/a" if value is None else value


MAX_KERNEL_P = 200  # training points shown in a kernel heat map (the first ones), to keep pages small


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
    labels = [figures.fmt_N(r["N"]) for r in recs]
    return with_slider(fig, [[{"z": rounded(m)}] for m in mats], labels, "N = ", traces=[0])


def accuracy_figure(recs: list[dict]) -> dict:
    """Test accuracy against the width N (log axis): renormalised theory, its two U ablations and GP baselines."""
    recs = sorted(recs, key=lambda r: float(r["N"]))
    N = [float(r["N"]) for r in recs]
    keys = ["accuracy", "accuracy_diagonal_only", "accuracy_equalised_diagonal"]
    keys += [k for k in recs[0] if k.startswith("accuracy_gp")]
    series = {k: (N, [r.get(k, np.nan) for r in recs]) for k in keys if k in recs[0]}
    return lines(series, "Test accuracy against N", "N (width)", "accuracy", xaxis={"type": "log"})


def kernel_figure(path: Path, names: list[str], U: np.ndarray) -> dict | None:
    """kernels.npz C_train [paths, paths, P, P]: the renormalised kernel Σ U_pp' C_pp' and each path's own kernel
    C_pp on the first `MAX_KERNEL_P` training points; a menu picks the kernel."""
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as z:
        C = np.asarray(z["C_train"])[:, :, :MAX_KERNEL_P, :MAX_KERNEL_P]
    mats = {"renormalised Σ U C": np.einsum("pq,pqmn->mn", U, C)}
    mats.update({f"C[{n}, {n}]": C[i, i] for i, n in enumerate(names)})
    fig = heatmap(
        next(iter(mats.values())), "renormalised Σ U C", hovertemplate="μ %{y}, ν %{x}<br>%{z:.4g}<extra></extra>"
    )
    fig["layout"]["updatemenus"] = [
        {
            "buttons": [
                {"label": k, "method": "update", "args": [{"z": [rounded(m)]}, {"title.text": k}]}
                for k, m in mats.items()
            ],
            "x": 0,
            "y": 1.15,
            "xanchor": "left",
        }
    ]
    fig["layout"]["margin"] = {"t": 80}
    return fig


FIGURE_CAPTIONS = {
    "solver_trace": "The solver's progress: the largest gradient |dS/dU| at each iteration, per phase",
    "kernel_alignment": "How well each path kernel aligns with the task (kernel-task alignment)",
}


def solve_report(path: Path) -> Report:
    """`paths solve`: the point's metrics, U heatmap, solver trace and kernel alignment."""
    run = RunDir(path)
    m, config = run.read_json("metrics.json"), run.read_config()
    width, temp = figures.fmt_N(config["N"]), config["temperature"]
    rep = Report(f"attention paths: solve ({config['task']}, N = {width}, T = {temp:g})")
    rep.table([{k: m[k] for k in SOLVE_COLUMNS}])
    names, U = run.read_json("paths.json")["path_names"], np.load(run.file("U.npy"))
    rep.plotly(u_figure(U, names, f"U at N = {figures.fmt_N(m['N'])}"), element_id(run.path, "U"), "Order parameter U")
    kernels = kernel_figure(run.file("kernels.npz"), names, U)
    if kernels is not None:
        rep.plotly(kernels, element_id(run.path, "kernels"), "Path kernels on the training points (menu: kernel)")
    for f in figures.solve_figures(run.path):
        if not f.stem.startswith("U_heatmap"):
            rep.figure(f, FIGURE_CAPTIONS.get(f.stem, ""))
    rep.write(run.file("report.html"))
    return rep


def sweep_report(path: Path, title: str | None = None) -> Report:
    """`paths sweep`: one row per width, accuracy vs alpha, U and alignment at the smallest width."""
    run = RunDir(path)
    recs, config = read_jsonl(run.file("points.jsonl")), run.read_config()
    wall = run.read_json("metrics.json").get("wall_s", float("nan"))
    rep = Report(title or f"attention paths: sweep ({config['task']})")
    rep.paragraph(
        f"Markov-style sweep over N with the {config['entropy_form']} entropy, T = {config['temperature']}, "
        f"P = {config['P']}; points run from large to small N, each warm-started. Wall time {wall:.1f} s."
    )
    rep.table([{k: r[k] for k in [*SWEEP_COLUMNS] + [k for k in r if k.startswith("accuracy_gp")]} for r in recs])
    names = run.read_json("paths.json")["path_names"]
    rep.plotly(accuracy_figure(recs), element_id(run.path, "accuracy"), "Accuracy against N (log axis; hover values)")
    rep.plotly(u_slider_figure(recs, names), element_id(run.path, "U"), "U at each width (slider)")
    for f, caption in figures.sweep_figures(run.path):
        if not f.stem.startswith("U_heatmap"):
            rep.figure(f, caption)
    rep.write(run.file("report.html"))
    return rep


def sample_report(path: Path) -> Report:
    """`paths sample`: sampler diagnostics and gates, sampled vs theory accuracy, U heatmaps."""
    run = RunDir(path)
    m, config = run.read_json("metrics.json"), run.read_config()
    rep = Report(f"attention paths: sample (N = {figures.fmt_N(m['N'])}, T = {config['temperature']:g})")
    row = {k: _not_available(m[k]) for k in SAMPLE_COLUMNS} | {"theory_accuracy": m["theory"]["accuracy"]}
    rep.table([row])
    if not m["converged"]:
        rep.paragraph(
            f"Sampler gates failed (R-hat {_not_available(m['rhat_max'])}, bulk ESS "
            f"{_not_available(m['ess_bulk_min'])}): the sampled values carry converged = false."
        )
    names = run.read_json("paths.json")["path_names"]
    U, U_hat = np.load(run.file("U.npy")), np.load(run.file("U_hat.npy"))
    for key, mat, what in (("U", U, "theory"), ("U_hat", U_hat, "sampled"), ("U_diff", U_hat - U, "sampled − theory")):
        rep.plotly(u_figure(mat, names, f"U: {what}"), element_id(run.path, key), f"U ({what})")
    figures.sample_figures(run.path)  # the PNG for documents
    rep.write(run.file("report.html"))
    return rep


def prune_report(path: Path) -> Report:
    """`paths prune`: GD network, chosen theory point, heads by score with GD and theory drops, figures."""
    run = RunDir(path)
    m, c = run.read_json("metrics.json"), run.read_config()
    rep = Report("attention paths: head scores and pruning (digits)")
    rep.paragraph(
        f"GD network: {c['layers']} layers x {c['heads']} heads, width {c['width']}, {c['steps']} steps; "
        f"test accuracy {m['gd_test_accuracy']:.3f}. Theory (N={m['chosen_N']}, T={m['chosen_T']}, chosen on "
        f"validation episodes). Hand-off attention max error {m['handoff_attention_err']:.2e}. Spearman "
        f"rho(score, GD drop) = {m['spearman_rho']:.2f}; rho(score, theory refit drop) = "
        f"{m['spearman_rho_theory']:.2f}."
    )
    rep.table(m["grid"], "validation grid")
    order = sorted(range(len(m["score"])), key=lambda i: m["score"][i])
    rows = [{"head": m["heads"][i], "score": m["score"][i], "acc_drop": m["acc_drop"][i],
             "theory_acc_drop": m["theory_acc_drop"][i]} for i in order]  # fmt: skip
    rep.table(rows, "heads by score (GD drop; theory drop = refit without the head)")
    for f in figures.prune_figures(run.path):
        rep.figure(f)
    rep.write(run.file("report.html"))
    return rep
