"""The scan's report.html, from the run folder only (never loads a model, never recomputes).

`write_report(run)` is the one entry: a single-model scan's page (a checkpoint of a series gets the same page in
its own folder) or, when summary.json holds a series, the series page. The thresholds in the text are the ones the
scan saved in summary.json; every figure is drawn by `attnlab.scan.figures` from the folder.
"""

from __future__ import annotations

from pathlib import Path

from attnlab.reports.page import Report, element_id
from attnlab.runs import RunDir
from attnlab.scan import figures
from attnlab.scan.tables import read_table


def _series_page(run: RunDir) -> Report:
    """A checkpoint series (scan --model D1 --model D2 …): the series table, each metric against the training
    step (one line per domain), and a link to every checkpoint's own scan report."""
    table = read_table(run.file("series.csv"))
    rep = Report("Checkpoint series scan")
    rep.paragraph("One scan per checkpoint, in the order given; each checkpoint's folder under checkpoints/ is a "
                  "complete scan with its own report.")  # fmt: skip
    for metric, view in figures.series_views(table).items():
        rep.plotly(view, f"series-{metric}", f"{metric} against the training step")
    pngs = figures.series_figures(run)
    rep.figure(pngs["checkpoint_series"], "Sink score, massive activation and value-norm ratio")
    if "sink_dynamics" in pngs:
        heads = run.read_json("summary.json")["sink_dynamics"][0]["sink_heads"]
        rep.figure(
            pngs["sink_dynamics"],
            f"Sink heads of the last checkpoint ({heads}): Attn⟨s⟩, value-norm and residual-norm "
            "ratios of token 0 against the step; dashed: onsets (half of each change)",
        )
    rep.table(table.to_dict("records"), caption="Every checkpoint and domain, one row each (series.csv)")
    links = sorted(p.name for p in run.file("checkpoints").iterdir() if (p / "report.html").is_file())
    rep.raw("<p>Checkpoints: " + " · ".join(f'<a href="checkpoints/{n}/report.html">{n}</a>' for n in links) + "</p>")
    return rep


def _add_sink_procedure(rep: Report, run: RunDir, s: dict) -> None:
    """The authors' sink-head procedure (R24): per-domain agreement with the key-0 classification, the layers'
    candidate tokens beyond token 0, and the figure (scans written before R24 have none of it)."""
    if "sink_procedure" not in s or not run.file("sink_heads_authors.csv").is_file():
        return
    proc = s["sink_procedure"]
    rep.heading("The authors' sink-head procedure")
    rep.paragraph(
        f"The authors' sink-head procedure: candidate sink tokens have a residual norm (at the layer's input) above "
        f"{proc[0]['ratio']:g} × the window's median; head h has a sink on candidate i when its mean attention score "
        f"(1/(T−i)) Σ_(j≥i) A_ji ≥ {proc[0]['threshold']:g}; a sink head has one in at least half of the windows. "
        f"Compared with the key-0 classification (sink score ≥ {s['thresholds']['dormant']:g})."
    )
    keys = ["domain", "authors_sink_heads", "authors_sink_heads_beyond0", "key0_sink_heads", "both", "authors_only",
            "key0_only", "neither", "jaccard", "windows_with_beyond0_sink", "beyond0_sink_layers",
            "beyond0_sunk_tokens"]  # fmt: skip
    rep.table([{k: p.get(k, "") for k in keys} for p in proc], caption="Authors' sink heads vs key-0 sink heads")
    rep.figure(
        figures.sink_procedure_figure(run),
        "Candidate sink tokens per layer, and the heads with a sink by the authors' procedure",
    )
    layers = read_table(run.file("sink_layers.csv"))
    busy = layers[(layers["beyond0_candidates_per_window"] > 0) | (layers["sink_heads_beyond0"] > 0)]
    rep.table(busy.to_dict("records"), caption="Layers with candidate sink tokens beyond token 0")


def _add_secondary_sinks(rep: Report, run: RunDir, s: dict) -> None:
    """Secondary sinks (issue 41): per domain the windows with a sink beyond token 0 in layers ≥ 2, and per layer
    the sink tokens with their scores (sink_levels.csv); a scan without full-row statistics says so."""
    from attnlab.scan import secondary

    sec = s.get("secondary_sinks")
    if not sec:
        return
    rep.heading("Secondary sinks")
    if not any(d.get("computed") for d in sec):
        rep.paragraph("Not computed: secondary sinks need every column sum (`attnlab scan --stats full`).")
        return
    first = next(d for d in sec if d.get("computed"))
    rep.paragraph(
        f"A key j ≥ 1 is a sink of a head when its received attention M_j = (1/(T−j)) Σ_(i≥j) A_ij ≥ {first['tau']:g} "
        f"in a window (keys seen by at least {first['min_queries']} queries). Lifetime: the consecutive layers from "
        f"the first; every sink token's MLP output norms and cosines with token 0's residual are in sinks.csv."
    )
    rep.table([{k: v for k, v in d.items() if k != "computed"} for d in sec], caption="Secondary sinks per domain")
    levels = read_table(run.file("sink_levels.csv"))
    rows = secondary.layer_table(levels.to_dict("records")) if len(levels) else []
    rep.table(rows, caption="Sink levels: per layer, the sink tokens ('text'@position=M_j, strongest first)")


def _add_summary(rep: Report, s: dict) -> None:
    """The summary section: settings with the saved thresholds, per-domain numbers, classes and shifts."""
    t = s["thresholds"]
    rep.heading("Summary")
    rep.paragraph(
        f"Model {s['model']}, T = {s['tokens']} tokens, prefix {s['prefix']}. A head is dormant on a domain if "
        f"its sink score (mean attention of queries 1..T−1 on key 0) is ≥ {t['dormant']}, active if < {t['active']}; "
        f"Sink_1^ε uses ε = {t['sink_eps']}."
    )
    rep.table(s["domains"], caption="Per domain")
    rep.table([s["class_counts"]], caption="Head classes across the scanned domains")
    if s["active_dormant"]:
        rep.paragraph("Active-dormant heads (layer.head): " + ", ".join(s["active_dormant"]))
    for key, val in s.items():
        if key.startswith("dormant_on_") and val:
            rep.table(val[:12], caption=f"Heads {key.replace('_', ' ')} (largest shift first, up to 12)")


def _add_massive(rep: Report, run: RunDir) -> None:
    """The layers with massive activations (layers.csv)."""
    layers = read_table(run.file("layers.csv"))
    if not len(layers):
        return
    rep.heading("Massive activations")
    big = layers[layers["n_massive"] > 0]
    cols = ["domain", "layer", "max_abs", "max_pos", "max_dim", "median_abs", "resid_norm_ratio", "massive_top"]
    rep.table(
        big[cols].to_dict("records"),
        caption="Layers with massive activations (|h| > 100 and > 1000 × median); layer −1 = embedding",
    )


def _scan_page(run: RunDir, s: dict) -> Report:
    """A single-model scan: summary, the layer × head explorer, norms, the sink-head procedure, massive
    activations."""
    traces = figures.read_traces(run, [d["domain"] for d in s["domains"]])
    sink = {d: tr.sink_score() for d, tr in traces.items()}
    revision = run.read_manifest().get("revision")  # a checkpoint of a series at a hub revision
    rep = Report(f"Real model scan: {s['model']}" + (f" at revision {revision}" if revision else ""))
    _add_summary(rep, s)
    rep.heading("Layer × head explorer")
    grid, view = element_id(run.path, "grid"), element_id(run.path, "pattern")
    figure, block, script = figures.head_explorer(run, sink, grid, view)
    rep.plotly(
        figure,
        grid,
        "Layer × head grid (menu: the statistic that colours it): click a head to see its attention pattern",
    )
    rep.raw(block, script, plotly=True)
    pngs = figures.scan_figures(run, traces)
    rep.heading("Residual and value norms")
    rep.figure(pngs["residual_norms"], "Residual norm of token 0 vs the median other token (log scale)")
    rep.figure(
        pngs["value_ratios"],
        "Value-norm ratio ‖W_O^h v_0‖ / median_t ‖W_O^h v_t‖ per layer (median and range over heads)",
    )
    _add_sink_procedure(rep, run, s)
    _add_secondary_sinks(rep, run, s)
    _add_massive(rep, run)
    return rep


def write_report(run: RunDir) -> Path:
    """Write report.html of the scan in `run` (atomically): the series page when summary.json holds a series."""
    s = run.read_json("summary.json")
    rep = _series_page(run) if "series" in s else _scan_page(run, s)
    return rep.write(run.file("report.html"))
