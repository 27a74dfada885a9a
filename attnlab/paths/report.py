"""The report of an `attnlab paths` run, built from the run folder alone (saved metrics, arrays, path names and the
title the run saved; never recomputed). One entry: `write_report(run) -> Path` picks the command's sections from
the run's manifest, has `figures` draw every figure and writes `report.html`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

import numpy as np

from attnlab.errors import InputError
from attnlab.paths import figures
from attnlab.reports.page import Report, element_id
from attnlab.runs import RunDir, read_jsonl

SOLVE_COLUMNS = ("N", "T", "alpha", "entropy_form", "converged", "iterations", "max_grad", "hessian_min_eig",
                 "action", "accuracy", "accuracy_gp", "wall_s")  # fmt: skip
SWEEP_COLUMNS = ("N", "alpha", "converged", "iterations", "max_grad", "hessian_min_eig", "accuracy",
                 "accuracy_diagonal_only", "accuracy_equalised_diagonal")  # fmt: skip
SAMPLE_COLUMNS = ("N", "alpha", "sampler", "rhat_max", "ess_bulk_min", "accept_mean", "divergences", "ebfmi_min",
                  "rel_frob_err", "sampled_accuracy", "wall_s", "converged")  # fmt: skip
ENSEMBLE_COLUMNS = ("rel_frob_err_gd", "run_spread", "accuracy_U_gd", "train_mse_max", "gd_wall_s")
# a run may save its report's title here (`paths sweep`'s `title`, e.g. the demo's); otherwise the default title
TITLE_FILE = "report_title.json"
FIGURE_CAPTIONS = {
    "solver_trace": "The solver's progress: the largest gradient |dS/dU| at each iteration, per phase",
    "kernel_alignment": "How well each path kernel aligns with the task (kernel-task alignment)",
}


def write_report(run: RunDir) -> Path:
    """Write `run`'s report.html from its folder (the command comes from manifest.json); returns its path."""
    command = str(run.read_manifest().get("command"))
    if command not in _SECTIONS:
        raise InputError(f"{run.path}: not a `paths` run (its manifest names {command!r}); no report written")
    rep = _SECTIONS[command](run)
    return rep.write(run.file("report.html"))


def _not_available(value: object) -> object:
    """A statistic saved as null (undefined, e.g. R-hat from too few draws) reads 'n/a' in a table."""
    return "n/a" if value is None else value


def _title(run: RunDir, default: str) -> str:
    """The title the run saved in `TITLE_FILE`, else `default`."""
    return run.read_json(TITLE_FILE)["title"] if run.file(TITLE_FILE).is_file() else default


def _solve(run: RunDir) -> Report:
    """`paths solve`: the point's metrics, U heatmap, path kernels, solver trace and kernel alignment."""
    m, config = run.read_json("metrics.json"), run.read_config()
    width, temp = figures.fmt_N(config["N"]), config["temperature"]
    rep = Report(_title(run, f"attention paths: solve ({config['task']}, N = {width}, T = {temp:g})"))
    rep.table([{k: m[k] for k in SOLVE_COLUMNS}])
    names, U = run.read_json("paths.json")["path_names"], np.load(run.file("U.npy"))
    U_fig = figures.u_figure(U, names, f"U at N = {figures.fmt_N(m['N'])}")
    rep.plotly(U_fig, element_id(run.path, "U"), "Order parameter U")
    kernels = figures.kernel_figure(run, names)
    if kernels is not None:
        rep.plotly(kernels, element_id(run.path, "kernels"), "Path kernels on the training points (menu: kernel)")
    for f in figures.solve_figures(run.path):
        if not f.stem.startswith("U_heatmap"):
            rep.figure(f, FIGURE_CAPTIONS.get(f.stem, ""))
    return rep


def _sweep(run: RunDir) -> Report:
    """`paths sweep`: one row per width, accuracy vs alpha, U and alignment at the smallest width."""
    recs, config = read_jsonl(run.file("points.jsonl")), run.read_config()
    wall = run.read_json("metrics.json").get("wall_s", float("nan"))
    rep = Report(_title(run, f"attention paths: sweep ({config['task']})"))
    rep.paragraph(
        f"Markov-style sweep over N with the {config['entropy_form']} entropy, T = {config['temperature']}, "
        f"P = {config['P']}; points run from large to small N, each warm-started. Wall time {wall:.1f} s."
    )
    rep.table([{k: r[k] for k in [*SWEEP_COLUMNS] + [k for k in r if k.startswith("accuracy_gp")]} for r in recs])
    names = run.read_json("paths.json")["path_names"]
    accuracy = figures.accuracy_figure(recs)
    rep.plotly(accuracy, element_id(run.path, "accuracy"), "Accuracy against N (log axis; hover values)")
    rep.plotly(figures.u_slider_figure(recs, names), element_id(run.path, "U"), "U at each width (slider)")
    for f, caption in figures.sweep_figures(run.path):
        if not f.stem.startswith("U_heatmap"):
            rep.figure(f, caption)
    return rep


def _sample(run: RunDir) -> Report:
    """`paths sample`: sampler diagnostics and gates, sampled vs theory accuracy, U heatmaps."""
    m, config = run.read_json("metrics.json"), run.read_config()
    rep = Report(_title(run, f"attention paths: sample (N = {figures.fmt_N(m['N'])}, T = {config['temperature']:g})"))
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
        rep.plotly(figures.u_figure(mat, names, f"U: {what}"), element_id(run.path, key), f"U ({what})")
    figures.sample_figures(run.path)  # the PNG for documents
    return rep


def _prune(run: RunDir) -> Report:
    """`paths prune`: GD network, chosen theory point, heads by score with GD and theory drops, figures."""
    m, c = run.read_json("metrics.json"), run.read_config()
    rep = Report(_title(run, "attention paths: head scores and pruning (digits)"))
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
    return rep


def _ensemble(run: RunDir) -> Report:
    """`paths ensemble` (S7): U theory | U_GD | difference, the loss curves and the comparison table."""
    m = run.read_json("metrics.json")
    default = f"attention paths: gradient-descent ensemble (N={m['N']:g}, T={m['T']:g}, {m['runs']} runs)"
    rep = Report(_title(run, default))
    rep.table([{k: m[k] for k in ENSEMBLE_COLUMNS}
               | {"theory_accuracy": m["theory"]["accuracy"], "gp_accuracy": m["theory"]["accuracy_gp"]}])  # fmt: skip
    for f in figures.ensemble_figures(run.path):
        rep.figure(f)
    return rep


_SECTIONS: Mapping[str, Callable[[RunDir], Report]] = MappingProxyType(
    {
        "paths solve": _solve,
        "paths sweep": _sweep,
        "paths sample": _sample,
        "paths prune": _prune,
        "paths ensemble": _ensemble,
    }
)
