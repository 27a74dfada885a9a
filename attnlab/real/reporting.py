"""Figures and report.html sections for scans and ablations."""

from __future__ import annotations

from attnlab.real import figures
from attnlab.real.analysis import ACTIVE, DORMANT, SINK_EPS
from attnlab.real.scan import ScanResult
from attnlab.report import Report
from attnlab.runs import RunDir


def scan_report(run: RunDir, res: ScanResult, title: str = "Real model scan") -> Report:
    """Draw the scan figures into run/figures and return the report section."""
    rep = Report(title)
    s = res.summary
    sink = {d: tr.sink_score() for d, tr in res.traces.items()}
    rep.paragraph(f"Model {s['model']} ({s['model_path']}), T = {s['tokens']} tokens, prefix {s['prefix']}. "
                  f"Run folder: {run.path}. A head is dormant on a domain if its sink score (mean attention of "
                  f"queries 1..T−1 on key 0) is ≥ {DORMANT}, active if < {ACTIVE}; Sink_1^ε uses ε = {SINK_EPS}.")
    rep.table(s["domains"], caption="Per domain")
    rep.table([s["class_counts"]], caption="Head classes across the scanned domains")
    if s["active_dormant"]:
        rep.paragraph("Active-dormant heads (layer.head): " + ", ".join(s["active_dormant"]))
    for key, val in s.items():
        if key.startswith("dormant_on_") and val:
            rep.table(val[:12], caption=f"Heads {key.replace('_', ' ')} (largest shift first, up to 12)")
    rep.figure(figures.sink_heatmaps(sink, run.figure_path("sink_heatmaps")), "Sink score per layer and head")
    rep.figure(figures.residual_norms(res.traces, run.figure_path("residual_norms")),
               "Residual norm of token 0 vs the median other token (log scale)")
    rep.figure(figures.value_ratios(res.traces, run.figure_path("value_ratios")),
               "Value-norm ratio ‖W_O^h v_0‖ / median_t ‖W_O^h v_t‖ per layer (median and range over heads)")
    maps = figures.attention_maps(res.patterns, sink, run.figure_path("attention_maps"))
    if maps:
        rep.figure(maps, "Attention patterns (first 64 positions of the first sample; colour = sqrt(A))")
    big = [r for r in res.layers if r["n_massive"]]
    if big:
        rep.table([{k: r[k] for k in ("domain", "layer", "max_abs", "max_pos", "max_dim", "median_abs",
                                        "resid_norm_ratio", "massive_top")} for r in big],
                  caption="Layers with massive activations (|h| > 100 and > 1000 × median); layer −1 = embedding")
    rep.write(run.path / "report.html")
    return rep


def ablation_report(run: RunDir, rows: list[dict], summary: dict, title: str = "Real model ablation") -> Report:
    """Draw the ablation figures and return the report section."""
    rep = Report(title)
    rep.paragraph(f"Run folder: {run.path}. ΔNLL = next-token loss with the intervention minus without, mean ± "
                  f"standard error over samples. Heads are zeroed before the output projection.")
    rep.table([{"domain": d, **v} for d, v in summary["baseline"].items()], caption="Clean loss per domain")
    rep.table([{"state": k, **v} for k, v in summary["by_state"].items()],
              caption=f"|ΔNLL| of zeroed heads by state on the domain (dormant: sink ≥ {DORMANT}; active: < {ACTIVE})")
    rep.table(rows, caption="All conditions")
    rep.figure(figures.ablation_bars(rows, run.figure_path("ablation_dnll")), "ΔNLL per condition and domain")
    sc = figures.ablation_scatter(rows, run.figure_path("ablation_vs_sink"))
    if sc:
        rep.figure(sc, "ΔNLL of a zeroed head against its sink score on the domain")
    rep.write(run.path / "report.html")
    return rep
