"""report.html of every `bb` run, built from the run folder only (never loads a model, never recomputes).

`write_report(run)` is the one entry: it reads the command from the run's manifest.json and lays out that
command's page. `bb train` saves what its report shows at the end of training (metrics.jsonl, snapshots/,
final/attention_map.npy, final/value_norms.npy, final/final.json); `bb theory` saves setup.json (its fixed
choices), metrics.json and arrays.npz; `bb intervene` saves interventions.json; `bb subspace` subspace.json;
`bb compare` the compared series in compared.json and the captions in figures.json. Every figure is drawn by
`attnlab.bb.figures` from those files.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from attnlab.bb import figures
from attnlab.bb.tables import summary_rows
from attnlab.reports.page import Report, element_id
from attnlab.runs import STEPPED, RunDir

CAPTIONS = {
    "dynamics": "The three phenomena over training: attention sink, Δlogit, value-state drain, "
    "residual-state norms, excess risks and losses (linear then log step axis).",
    "attention_map": "Attention of evaluation sequence 0 (first 32 tokens); triggers in red.",
    "value_norms": "‖W_O v_i‖ for the first positions: the <s> bar (red) drains.",
}


def _add_views(rep: Report, run: RunDir, cfg: dict) -> None:
    """The zoomable curves of every metric and the snapshot slider (attention, value and residual bars)."""
    views = figures.train_views(run, cfg)
    if "curves" in views:
        rep.plotly(
            views["curves"],
            element_id(run.path, "curves"),
            "Every metric over training (menu: metric; name[l.h] = layer l, head h): drag to zoom, double-click to "
            "reset",
        )
    if "snapshots" in views:
        rep.plotly(
            views["snapshots"],
            element_id(run.path, "snapshots"),
            f"Saved snapshots (slider or play): layer {figures.attention_layer(cfg)} head 0 attention on the first "
            "16 tokens of evaluation sequence 0; ‖W_O v_i‖ per position (<s> in red) and the residual norm after the "
            "block",
        )


def _train_page(run: RunDir) -> Report:
    """A `bb train` run: settings, summary table, figures and the active-token probe."""
    cfg = run.read_config()
    rep = Report(
        f"BB run: {cfg['n_layers']}-layer {cfg['attention']} attention, {cfg['optimizer']} "
        f"(lr {cfg['lr']:g}, seed {cfg['seed']})"
    )
    rep.paragraph(
        f"Run folder: {run.path.name}. Preset {cfg['preset']}: d_model {cfg['d_model']}, T {cfg['seq_len']}, "
        f"batch {cfg['batch']}, {cfg['steps']} steps; metrics on a fixed evaluation batch of "
        f"{cfg['eval_batch']} sequences."
    )
    if (run.path / "train_summary.json").exists():
        s = run.read_json("train_summary.json")
        rep.paragraph(f"Training wall time: {s.get('wall_seconds')} s (this invocation).")
    rep.table(summary_rows(run.metrics(STEPPED)), caption="Metrics over training (layer 0, head 0)")
    _add_views(rep, run, cfg)
    for name, path in figures.train_figures(run, cfg).items():
        rep.figure(path, CAPTIONS.get(name, name))
    probe = run.read_json("final/final.json").get("probe") if (run.path / "final" / "final.json").exists() else []
    if probe:
        rep.table(
            probe,
            caption="Active-token probe (§6.6): input [<s>, every character, probe]; the probe is "
            "active when its attention to <s> is below 0.89",
        )
    return rep


def _sample_page(run: RunDir) -> Report:
    """A `bb sample` run: what was sampled and its statistics."""
    cfg, meta, stats = run.read_config(), run.read_json("meta.json"), run.read_json("metrics.json")
    rep = Report("BB sample")
    rep.paragraph(
        f"{cfg['n']} sequences of {cfg['seq_len'] + 1} tokens; triggers {meta['trigger_chars']}; "
        f"V = {meta['vocab_size']}."
    )
    rep.table([stats], caption="Sample statistics")
    return rep


def _intervene_page(run: RunDir) -> Report:
    """A `bb intervene` run: the risks under each intervention."""
    cfg = run.read_config()
    rep = Report("Interventions on the final model")
    rep.paragraph(
        f"Training run: {Path(cfg['run_dir']).name}. Risks on its evaluation batch with each head, MLP and layer "
        "zeroed, and with each head's attention moved onto <s> (spec §7)."
    )
    rep.table(run.read_json("interventions.json"), caption="Interventions on the final model (evaluation batch)")
    return rep


def _subspace_page(run: RunDir) -> Report:
    """A `bb subspace` run (R19, spec extreme-tokens §14): the subspace numbers and the spectra/angles figure."""
    cfg = run.read_config()
    m = run.read_json("subspace.json")
    rep = Report("Attention and MLP output subspaces (R19)")
    rep.paragraph(
        f"Training run: {Path(cfg['run_dir']).name} ({m['block']} block), layer {cfg['layer']}, step {m['step']}. "
        f"Rows: the attention and MLP outputs of all {m['n_vectors']} (sequence, position) pairs of the evaluation "
        f"batch; each subspace keeps the top-k right singular vectors holding {m['energy']:.0%} of the energy. "
        "A random subspace of the MLP's dimension would hold k_mlp / d_model of the attention energy."
    )
    keys = (
        "k_attn",
        "k_mlp",
        "min_angle_deg",
        "median_angle_deg",
        "energy_attn_in_mlp",
        "random_baseline_attn_in_mlp",
        "energy_mlp_in_attn",
        "random_baseline_mlp_in_attn",
    )
    rep.table([{k: m[k] for k in keys}], caption="Subspace measure")
    rep.figure(figures.subspace_figures(run)["subspace"], "Output spectra and principal angles")
    return rep


def _compare_page(run: RunDir) -> Report:
    """A `bb compare` run: one figure per group of metrics, captioned by figures.json."""
    rep = Report(run.read_config()["title"])
    drawn = figures.compare_figures(run)
    for name, caption in run.read_json("figures.json").items():
        rep.figure(drawn[name], caption)
    return rep


def _theory_page(run: RunDir) -> Report:
    """A `bb theory` run: slope table, Adam/SGD table, three figures; its fixed choices come from setup.json."""
    metrics, setup = run.read_json("metrics.json"), run.read_json("setup.json")
    ns, integ = setup["context_sizes"], setup["integrator"]
    rep = Report("Theory: mutual reinforcement and the Adam residual peak")
    rep.paragraph(
        f"Run folder: {run.path.name}. Gradient flow of the simplified loss (spec §9.1–9.4; m = {setup['m']} "
        f"query tokens, K = {setup['K']}, context size n {setup['context_weights']} on {min(ns)}..{max(ns)}) "
        f"integrated with {integ['method']} (rtol {integ['rtol']:g}, atol {integ['atol']:g}); slopes are "
        "least-squares fits against log t."
    )
    rep.table(_slope_rows(metrics), caption="Slopes against log t")
    s, g = metrics["single_n"], metrics["gradient_descent"]
    rep.paragraph(
        f"Negative control, single n = {s['n']}: the flow converges (max |Δα| over the last two decades "
        f"{s['alpha_change_last_two_decades']:.2e}, ℓ = {s['loss_final']:.1e}). Plain gradient descent "
        f"(lr {g['lr']:g}, {g['steps']} steps): largest loss increase {g['max_loss_increase']:.2e}, "
        f"smallest α increment {g['min_alpha_increment']:.2e}."
    )
    fig = figures.theory_figures(run)
    rep.figure(fig["theory_alpha"], "α_v against t (log axis) with the ½ log t guide; dashed: single-n control")
    rep.figure(fig["theory_beta_loss"], "‖β − mean β‖ and ℓ on log-log axes with t^−½ and t^−1 guides")
    r = metrics["reduced_recursion"]
    rep.table(
        _residual_rows(metrics, setup["residual"]["lr"]),
        caption=f"Residual norm m after {r['steps']} steps from m0 = {r['m0']:g} (spec §9.5)",
    )
    rep.figure(
        fig["theory_residual_adam_sgd"],
        "m(t) under Adam and SGD: Adam's normalised steps grow the residual, SGD's barely move it",
    )
    return rep


def _residual_rows(metrics: dict, lr_reduced: float) -> list[dict]:
    """m after the last step under Adam and SGD: the reduced recursion (at `lr_reduced`), then the two-parameter
    model per lr."""
    r, tp = metrics["reduced_recursion"], metrics["two_param"]
    rows = [
        {
            "model": f"reduced recursion, lr {lr_reduced:g}",
            "Adam m": r["m_adam"],
            "SGD m": r["m_sgd"],
            "SGD closed form": r["m_sgd_closed_form"],
        }
    ]
    for j, lr in enumerate(tp["lrs"]):
        rows.append(
            {
                "model": f"two-parameter, lr {lr:g}",
                "Adam m": float(tp["m_ratio_adam"][j]) * tp["m0"],
                "SGD m": float(tp["m_ratio_sgd"][j]) * tp["m0"],
            }
        )
    return rows


def _slope_rows(metrics: dict) -> list[dict]:
    """The fitted slopes of α, log ‖β − mean β‖ and log ℓ in the late and the transient window."""
    late, tr = metrics["late_slopes"], metrics["transient_slopes"]
    lo, hi = metrics["late_window"]
    t_lo, t_hi = metrics["transient_window"]
    rows = []
    for name, key, expect in [
        ("α_v (each v)", "alpha", "0.5"),
        ("log ‖β − mean β‖", "log_beta_spread", "−0.5"),
        ("log ℓ", "log_loss", "−1"),
    ]:
        fmt = (lambda x: ", ".join(f"{a:.4f}" for a in x)) if key == "alpha" else (lambda x: f"{x:.4f}")
        rows.append(
            {
                "quantity": name,
                "predicted late slope": expect,
                f"slope [{lo:.0e}, {hi:.0e}]": fmt(late[key]),
                f"slope [{t_lo:.0e}, {t_hi:.0e}] (transient)": fmt(tr[key]),
            }
        )
    return rows


PAGES: dict[str, Callable[[RunDir], Report]] = {
    "bb sample": _sample_page,
    "bb train": _train_page,
    "bb intervene": _intervene_page,
    "bb subspace": _subspace_page,
    "bb theory": _theory_page,
    "bb compare": _compare_page,
}


def write_report(run: RunDir) -> Path:
    """Write report.html of the `bb` run in `run` (atomically), the page of the command in its manifest."""
    return PAGES[run.read_manifest()["command"]](run).write(run.file("report.html"))
