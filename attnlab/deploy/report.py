"""`attnlab deploy` report.html pages, from the run folder only (never loads a model, never recomputes)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from attnlab.deploy import figures
from attnlab.report import Report
from attnlab.runs import RunDir


def slug(name: str) -> str:
    """A file name for a policy name ("sink+window 256" -> "sink-window-256")."""
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")


def read_table(path: str | Path, name: str = "perplexity.csv") -> pd.DataFrame:
    """A CSV of the run folder as a DataFrame (empty cells kept as "")."""
    return pd.read_csv(Path(path) / name, keep_default_na=False, na_values=["nan", "NaN"])


def write_quant_report(path: str | Path, title: str = "Fake int8 activation quantisation") -> Report:
    """Draw the perplexity bars into path/figures, write path/report.html and return the report."""
    run = RunDir(path)
    cfg = run.read_config()
    rows = read_table(run.path).to_dict("records")
    outliers = read_table(run.path, "outliers.csv").to_dict("records")
    rep = Report(title)
    rep.paragraph(
        f"Run folder: {run.path.name}. Model {cfg['model']}, {cfg['samples']} windows of {cfg['tokens']} tokens per "
        f"domain. Symmetric per-tensor int{cfg['bits']} fake quantisation of each window's activations (scale = "
        f"absmax / {2 ** (cfg['bits'] - 1) - 1}); outlier channels: peak > {cfg['outlier_ratio']} x the median "
        f"channel peak, at most {cfg['max_outliers']} per tensor; 'exclude' keeps them in full precision, 'clip' "
        f"clamps them to the range, 'naive' puts them in the scale. Sites: linear = the input of every Linear in "
        f"the decoder blocks, residual = the hidden state entering each block."
    )
    rep.table(rows, caption="Perplexity per domain and condition")
    png = figures.perplexity_bars(rows, "label", run.figure_path("perplexity"), "Perplexity under quantisation")
    rep.figure(png, "Perplexity per condition and domain (log scale)")
    rep.table(
        sorted(outliers, key=lambda r: -float(r["max_ratio"]))[:60],
        caption="Outlier channels left out of the scale (largest peak ratios first, at most 60 rows)",
    )
    rep.write(run.file("report.html"))
    return rep


def window_arrays(path: str | Path, rows: list[dict]) -> dict[str, dict[str, np.ndarray]]:
    """{domain: {policy: per-position NLL [N, T−1]}} read back from path/nll/."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for r in rows:
        out.setdefault(r["domain"], {})[r["policy"]] = np.load(
            Path(path) / "nll" / r["domain"] / f"{slug(r['policy'])}.npy"
        )
    return out


def write_window_report(path: str | Path, title: str = "Sliding-window KV policy with and without the sink") -> Report:
    """Draw the perplexity bars and NLL-by-position curves into path/figures, write path/report.html."""
    run = RunDir(path)
    cfg = run.read_config()
    rows = read_table(run.path).to_dict("records")
    rep = Report(title)
    rep.paragraph(
        f"Run folder: {run.path.name}. Model {cfg['model']}, {cfg['samples']} windows of {cfg['tokens']} tokens per "
        f"domain. 'window W': query i sees keys i-W+1..i; 'sink+window W': also keys 0..{cfg['sink_tokens'] - 1} "
        f"(the attention sink); 'full': causal attention through the same 4D mask. Position ids are those of the "
        f"full window. Tail columns: predictions from query positions >= {rows[0]['tail_from'] if rows else '-'}."
    )
    rep.table(rows, caption="Perplexity per domain and policy")
    png = figures.perplexity_bars(rows, "policy", run.figure_path("perplexity"), "Perplexity per KV policy")
    rep.figure(png, "Perplexity per policy and domain (log scale)")
    curves = figures.nll_by_position(window_arrays(run.path, rows), run.figure_path("nll_by_position"))
    rep.figure(curves, "Mean NLL against the query position")
    rep.write(run.file("report.html"))
    return rep
