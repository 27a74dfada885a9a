"""The scan's report.html, from the run folder only (never loads a model, never recomputes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from attnlab.hf.analysis import ACTIVE, DORMANT, SINK_EPS
from attnlab.report import Report
from attnlab.runs import RunDir
from attnlab.scan import figures
from attnlab.trace.format import Trace

TABLES = ("heads", "layers", "massive", "classes")


def read_table(path: Path) -> pd.DataFrame:
    """One CSV of a run folder as a DataFrame (empty strings kept as ""; an empty file gives an empty frame)."""
    if not path.is_file() or path.stat().st_size == 0:
        return pd.DataFrame()
    return pd.read_csv(path, keep_default_na=False, na_values=["nan", "NaN"])


def read_tables(path: str | Path) -> dict[str, pd.DataFrame]:
    """The scan's tables: heads, layers, massive, classes."""
    return {name: read_table(Path(path) / f"{name}.csv") for name in TABLES}


def read_patterns(run: RunDir, domains: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """patterns/<domain>/<l>.<h>.npy -> {domain: {"l.h": [T,T]}} in the summary's pattern-head order."""
    heads = run.read_json("summary.json")["pattern_heads"]
    out: dict[str, dict[str, np.ndarray]] = {}
    for d in domains:
        files = {k: run.file("patterns") / d / f"{k}.npy" for k in heads}
        out[d] = {k: np.load(f, allow_pickle=False) for k, f in files.items() if f.is_file()}
    return out


def write_report(path: str | Path, title: str = "Real model scan") -> Report:
    """Draw the scan figures into path/figures, write path/report.html and return the report section."""
    run = RunDir(path)
    s = run.read_json("summary.json")
    domains = [d["domain"] for d in s["domains"]]
    traces = {d: Trace.load(run.file("traces") / d) for d in domains}
    sink = {d: tr.sink_score() for d, tr in traces.items()}
    rep = Report(title)
    rep.paragraph(
        f"Model {s['model']} ({s['model_path']}), T = {s['tokens']} tokens, prefix {s['prefix']}. "
        f"Run folder: {run.path}. A head is dormant on a domain if its sink score (mean attention of "
        f"queries 1..T−1 on key 0) is ≥ {DORMANT}, active if < {ACTIVE}; Sink_1^ε uses ε = {SINK_EPS}."
    )
    rep.table(s["domains"], caption="Per domain")
    rep.table([s["class_counts"]], caption="Head classes across the scanned domains")
    if s["active_dormant"]:
        rep.paragraph("Active-dormant heads (layer.head): " + ", ".join(s["active_dormant"]))
    for key, val in s.items():
        if key.startswith("dormant_on_") and val:
            rep.table(val[:12], caption=f"Heads {key.replace('_', ' ')} (largest shift first, up to 12)")
    rep.figure(figures.sink_heatmaps(sink, run.figure_path("sink_heatmaps")), "Sink score per layer and head")
    rep.figure(
        figures.residual_norms(traces, run.figure_path("residual_norms")),
        "Residual norm of token 0 vs the median other token (log scale)",
    )
    rep.figure(
        figures.value_ratios(traces, run.figure_path("value_ratios")),
        "Value-norm ratio ‖W_O^h v_0‖ / median_t ‖W_O^h v_t‖ per layer (median and range over heads)",
    )
    maps = figures.attention_maps(read_patterns(run, domains), sink, run.figure_path("attention_maps"))
    if maps:
        rep.figure(maps, "Attention patterns (first 64 positions of the first sample; colour = sqrt(A))")
    layers = read_table(run.file("layers.csv"))
    if len(layers):
        big = layers[layers["n_massive"] > 0]
        cols = ["domain", "layer", "max_abs", "max_pos", "max_dim", "median_abs", "resid_norm_ratio", "massive_top"]
        rep.table(
            big[cols].to_dict("records"),
            caption="Layers with massive activations (|h| > 100 and > 1000 × median); layer −1 = embedding",
        )
    rep.write(run.file("report.html"))
    return rep
