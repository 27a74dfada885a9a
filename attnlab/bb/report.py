"""report.html of every `bb` run, built from the run folder only (never loads a model, never recomputes).

`bb train` saves what its report shows at the end of training (metrics.jsonl, final/attention_map.npy,
final/value_norms.npy, final/final.json); `bb theory` saves metrics.json and arrays.npz; `bb intervene` saves
interventions.json; `bb compare` reads the metrics of the runs it compares.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnlab.bb import figures
from attnlab.bb.metrics import metric
from attnlab.report import Report, element_id, rounded, with_slider
from attnlab.runs import RunDir

SUMMARY_KEYS = (
    "attn_sink",
    "delta_logit",
    "value_norm_bos",
    "value_norm_others",
    "resid_norm_bos",
    "resid_norm_others",
    "excess_risk_backcopy",
    "excess_risk_bigram",
    "loss",
)
CAPTIONS = {
    "dynamics": "The three phenomena over training: attention sink, Δlogit, value-state drain, "
    "residual-state norms, excess risks and losses (linear then log step axis).",
    "attention_map": "Attention of evaluation sequence 0 (first 32 tokens); triggers in red.",
    "value_norms": "‖W_O v_i‖ for the first positions: the <s> bar (red) drains.",
}


def summary_rows(metrics: list[dict], steps: tuple[int, ...] = (0, 100, 200, 400, 1000)) -> list[dict]:
    """Metrics (layer 0, head 0) at a few steps and at the end."""
    by_step = {r["step"]: r for r in metrics}
    chosen = [s for s in steps if s in by_step] + ([metrics[-1]["step"]] if metrics else [])
    return [{"step": s, **{k: metric(by_step[s], k) for k in SUMMARY_KEYS}} for s in dict.fromkeys(chosen)]


def curves_figure(rows: list[dict], lin_until: int) -> dict:
    """Every metric of metrics.jsonl against the step (one column of the metrics table per trace); a menu picks
    the metric, another switches the step axis between linear and log. Drag to zoom, double-click to reset."""
    names = [k for k in rows[0] if k != "step"] if rows else []
    steps = [r["step"] for r in rows]
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": n,
            "x": steps,
            "y": rounded([np.nan if r.get(n) is None else r[n] for r in rows]),
            "visible": i == 0,
        }
        for i, n in enumerate(names)
    ]
    pick = [
        {
            "label": n,
            "method": "update",
            "args": [{"visible": [j == i for j in range(len(names))]}, {"title.text": n, "yaxis.title.text": n}],
        }
        for i, n in enumerate(names)
    ]
    axis = [{"label": t, "method": "relayout", "args": [{"xaxis.type": t}]} for t in ("linear", "log")]
    return {
        "data": data,
        "layout": {
            "title": {"text": names[0] if names else ""},
            "xaxis": {"title": {"text": f"step (snapshots every few steps up to {lin_until}, then log-spaced)"}},
            "yaxis": {"title": {"text": names[0] if names else ""}, "automargin": True},
            "updatemenus": [
                {"buttons": pick, "x": 0, "y": 1.18, "xanchor": "left", "direction": "down"},
                {"buttons": axis, "x": 0.45, "y": 1.18, "xanchor": "left", "type": "buttons", "direction": "right"},
            ],
            "margin": {"t": 90},
            "hovermode": "x unified",
        },
    }


def read_snapshots(run: RunDir) -> list[tuple[int, dict[str, np.ndarray]]]:
    """snapshots/step_<s>.safetensors in step order: (step, {name: array}) (see bb.experiment.Evaluator)."""
    from safetensors.numpy import load_file

    files = sorted(run.path.glob("snapshots/step_*.safetensors"), key=lambda f: int(f.stem.split("_")[1]))
    return [(int(f.stem.split("_")[1]), load_file(str(f))) for f in files]


def snapshots_figure(snaps: list[tuple[int, dict[str, np.ndarray]]], labels: list[str], layer: int) -> dict | None:
    """A slider over the saved snapshots: head 0's attention on the first 16 tokens of evaluation sequence 0
    (attn_block16 [H,16,16]), ‖W_O v_i‖ per position (value_norm [L,H,T]) and ‖x_i‖ after block `layer`
    (resid_norm [L+1,T]) for the same positions."""
    snaps = [(s, a) for s, a in snaps if "attn_block16" in a]
    if not snaps:
        return None
    n = snaps[0][1]["attn_block16"].shape[-1]
    pos = [f"{i} {t}" for i, t in enumerate(labels[:n])]
    hover = "query %{y}<br>key %{x}<br>weight %{z:.4f}<extra></extra>"

    def traces(a: dict[str, np.ndarray]) -> list[dict]:
        return [
            {"type": "heatmap", "z": rounded(a["attn_block16"][0]), "x": pos, "y": pos, "zmin": 0, "zmax": 1,
             "colorscale": "Viridis", "hovertemplate": hover,
             "colorbar": {"x": 0.43, "xanchor": "left", "len": 1, "thickness": 12, "title": {"text": "weight"}}},
            {"type": "bar", "x": pos, "y": rounded(a["value_norm"][layer, 0, :n]), "xaxis": "x2", "yaxis": "y2",
             "name": "‖W_O v_i‖", "marker": {"color": ["#d62728"] + ["#1f77b4"] * (n - 1)}},
            {"type": "bar", "x": pos, "y": rounded(a["resid_norm"][layer + 1, :n]), "xaxis": "x3", "yaxis": "y3",
             "name": f"‖x_i‖ after block {layer}", "marker": {"color": "#9467bd"}},
        ]  # fmt: skip

    layout = {
        "height": 560,
        # the colour bar sits in the gap after the heat map; the bars' y titles start past it (no overlap)
        "xaxis": {
            "domain": [0, 0.42],
            "type": "category",
            "tickfont": {"family": "monospace", "size": 9},
            "title": {"text": "key (position, token)"},
        },
        "yaxis": {
            "autorange": "reversed",
            "type": "category",
            "tickfont": {"family": "monospace", "size": 9},
            "title": {"text": "query"},
        },
        "xaxis2": {"domain": [0.62, 1], "anchor": "y2", "type": "category", "showticklabels": False},
        "yaxis2": {"domain": [0.56, 1], "anchor": "x2", "title": {"text": "‖W_O v_i‖"}},
        "xaxis3": {
            "domain": [0.62, 1],
            "anchor": "y3",
            "type": "category",
            "tickfont": {"size": 9},
            "title": {"text": "position, token"},
        },
        "yaxis3": {"domain": [0, 0.44], "anchor": "x3", "title": {"text": "‖x_i‖"}},
        "showlegend": False,
        "margin": {"t": 30},
    }
    fig = {"data": traces(snaps[-1][1]), "layout": layout}
    return with_slider(fig, [traces(a) for _, a in snaps], [str(s) for s, _ in snaps], "step ", play=True)


def add_interactive(rep: Report, run: RunDir, cfg: dict) -> None:
    """The zoomable curves of every metric and the snapshot slider (attention, value and residual bars)."""
    from attnlab.bb.run import metrics_table  # run.py imports this module

    rows = metrics_table(run.metrics())
    if rows:
        rep.plotly(
            curves_figure(rows, cfg["lin_until"]),
            element_id(run.path, "curves"),
            "Every metric over training (menu: metric; name[l.h] = layer l, head h): drag to zoom, double-click to "
            "reset",
        )
    attn = [l for l in range(cfg["n_layers"]) if l not in cfg["no_attn"]]
    final = run.read_json("final/final.json") if (run.path / "final" / "final.json").exists() else None
    if not attn or final is None:
        return
    labels = [final["token_names"][t] for t in final["tokens"]]
    fig = snapshots_figure(read_snapshots(run), labels, attn[0])
    if fig is not None:
        rep.plotly(
            fig,
            element_id(run.path, "snapshots"),
            f"Saved snapshots (slider or play): layer {attn[0]} head 0 attention on the first 16 tokens of "
            "evaluation sequence 0; ‖W_O v_i‖ per position (<s> in red) and the residual norm after the block",
        )


def train_figures(run: RunDir, cfg: dict) -> dict[str, Path]:
    """Dynamics per layer, the attention map of evaluation sequence 0 and the value-norm bars (final model)."""
    metrics = run.metrics()
    label = f"{cfg['n_layers']}-layer {cfg['attention']}, {cfg['optimizer']} lr {cfg['lr']:g}"
    figs = {}
    for layer in range(cfg["n_layers"]):
        name = "dynamics" if layer == 0 else f"dynamics_layer{layer}"
        figs[name] = figures.dynamics(
            metrics, run.figure_path(name), cfg["lin_until"], layer, title=f"{label}: layer {layer}"
        )
    if not (run.path / "final" / "attention_map.npy").exists():
        return figs
    final = run.read_json("final/final.json")
    layer = [l for l in range(cfg["n_layers"]) if l not in cfg["no_attn"]][0]
    pattern = np.load(run.path / "final" / "attention_map.npy")
    figs["attention_map"] = figures.attention_map(
        pattern,
        final["tokens"][: pattern.shape[0]],
        final["token_names"],
        final["triggers"],
        run.figure_path("attention_map"),
        title=f"layer {layer} head 0, step {final['step']}",
    )
    norms = np.load(run.path / "final" / "value_norms.npy")[layer, 0, :10]
    figs["value_norms"] = figures.value_norm_bars(
        norms.tolist(),
        ["<s>"] + [f"x{i}" for i in range(1, 10)],
        run.figure_path("value_norms"),
        title=f"‖W_O v_i‖, first positions (step {final['step']})",
    )
    return figs


def train_report(run_dir: str | Path) -> Report:
    """The section of a `bb train` run: settings, summary table, figures and the active-token probe."""
    run = RunDir(run_dir)
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
    rep.table(summary_rows(run.metrics()), caption="Metrics over training (layer 0, head 0)")
    add_interactive(rep, run, cfg)
    for name, path in train_figures(run, cfg).items():
        rep.figure(path, CAPTIONS.get(name, name))
    probe = run.read_json("final/final.json").get("probe") if (run.path / "final" / "final.json").exists() else []
    if probe:
        rep.table(
            probe,
            caption="Active-token probe (§6.6): input [<s>, every character, probe]; the probe is "
            "active when its attention to <s> is below 0.89",
        )
    return rep


def sample_report(run_dir: str | Path) -> Report:
    run = RunDir(run_dir)
    cfg, meta, stats = run.read_config(), run.read_json("meta.json"), run.read_json("metrics.json")
    rep = Report("BB sample")
    rep.paragraph(
        f"{cfg['n']} sequences of {cfg['seq_len'] + 1} tokens; triggers {meta['trigger_chars']}; "
        f"V = {meta['vocab_size']}."
    )
    rep.table([stats], caption="Sample statistics")
    return rep


def intervene_report(run_dir: str | Path) -> Report:
    run = RunDir(run_dir)
    cfg = run.read_config()
    rep = Report("Interventions on the final model")
    rep.paragraph(
        f"Training run: {Path(cfg['run_dir']).name}. Risks on its evaluation batch with each head, MLP and layer "
        "zeroed, and with each head's attention moved onto <s> (spec §7)."
    )
    rep.table(run.read_json("interventions.json"), caption="Interventions on the final model (evaluation batch)")
    return rep


def compare_report(run_dir: str | Path) -> Report:
    run = RunDir(run_dir)
    cfg = run.read_config()
    rep = Report(cfg["title"])
    for name, caption in run.read_json("figures.json").items():
        rep.figure(run.path / "figures" / f"{name}.png", caption)
    return rep


def theory_report(run_dir: str | Path) -> Report:
    """The theory section: slope table, Adam/SGD table, three figures."""
    from attnlab.bb._theory.simulate import K_VOCAB, M_TOKENS, TRANSIENT

    run = RunDir(run_dir)
    metrics = run.read_json("metrics.json")
    rep = Report("Theory: mutual reinforcement and the Adam residual peak")
    rep.paragraph(
        f"Run folder: {run.path.name}. Gradient flow of the simplified loss (spec §9.1–9.4; m = {M_TOKENS} "
        f"query tokens, K = {K_VOCAB}, context size n uniform on 1..10) integrated with LSODA "
        "(rtol 1e-10, atol 1e-12); slopes are least-squares fits against log t."
    )
    rep.table(_slope_rows(metrics, TRANSIENT), caption="Slopes against log t")
    s, g = metrics["single_n"], metrics["gradient_descent"]
    rep.paragraph(
        f"Negative control, single n = {s['n']}: the flow converges (max |Δα| over the last two decades "
        f"{s['alpha_change_last_two_decades']:.2e}, ℓ = {s['loss_final']:.1e}). Plain gradient descent "
        f"(lr {g['lr']:g}, {g['steps']} steps): largest loss increase {g['max_loss_increase']:.2e}, "
        f"smallest α increment {g['min_alpha_increment']:.2e}."
    )
    fig = run.path / "figures"
    rep.figure(fig / "theory_alpha.png", "α_v against t (log axis) with the ½ log t guide; dashed: single-n control")
    rep.figure(fig / "theory_beta_loss.png", "‖β − mean β‖ and ℓ on log-log axes with t^−½ and t^−1 guides")
    r, tp = metrics["reduced_recursion"], metrics["two_param"]
    rows = [
        {
            "model": "reduced recursion, lr 0.3",
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
    rep.table(rows, caption=f"Residual norm m after {r['steps']} steps from m0 = {r['m0']:g} (spec §9.5)")
    rep.figure(
        fig / "theory_residual_adam_sgd.png",
        "m(t) under Adam and SGD: Adam's normalised steps grow the residual, SGD's barely move it",
    )
    return rep


def _slope_rows(metrics: dict, transient: tuple[float, float]) -> list[dict]:
    late, tr = metrics["late_slopes"], metrics["transient_slopes"]
    lo, hi = metrics["late_window"]
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
                f"slope [{transient[0]:.0e}, {transient[1]:.0e}] (transient)": fmt(tr[key]),
            }
        )
    return rows


def write_report(rep: Report, run: RunDir) -> Path:
    """Write `rep` as the run's report.html (atomically)."""
    return rep.write(run.path / "report.html")
