"""Reports of `attnlab paths` runs, built from the run folder alone (saved metrics, arrays and path names; never
recomputed). Each `*_report(path)` draws the figures, writes `report.html` and returns the `Report`."""

from __future__ import annotations

from pathlib import Path

from attnlab.paths import figures
from attnlab.report import Report
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


def solve_report(path: Path) -> Report:
    """`paths solve`: the point's metrics, U heatmap, solver trace and kernel alignment."""
    run = RunDir(path)
    m, config = run.read_json("metrics.json"), run.read_config()
    rep = Report(f"attention paths: solve ({config['task']}, N={config['N']}, T={config['temperature']})")
    rep.table([{k: m[k] for k in SOLVE_COLUMNS}])
    for f in figures.solve_figures(run.path):
        rep.figure(f)
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
    for f, caption in figures.sweep_figures(run.path):
        rep.figure(f, caption)
    rep.write(run.file("report.html"))
    return rep


def sample_report(path: Path) -> Report:
    """`paths sample`: sampler diagnostics and gates, sampled vs theory accuracy, U heatmaps."""
    run = RunDir(path)
    m, config = run.read_json("metrics.json"), run.read_config()
    rep = Report(f"attention paths: sample (N={figures.fmt_N(m['N'])}, T={config['temperature']})")
    row = {k: _not_available(m[k]) for k in SAMPLE_COLUMNS} | {"theory_accuracy": m["theory"]["accuracy"]}
    rep.table([row])
    if not m["converged"]:
        rep.paragraph(
            f"Sampler gates failed (R-hat {_not_available(m['rhat_max'])}, bulk ESS "
            f"{_not_available(m['ess_bulk_min'])}): the sampled values carry converged = false."
        )
    for f in figures.sample_figures(run.path):
        rep.figure(f)
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
