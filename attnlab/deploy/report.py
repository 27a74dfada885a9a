"""`attnlab deploy` report.html pages, from the run folder only (never loads a model, never recomputes)."""

from __future__ import annotations

from pathlib import Path

from attnlab.deploy.tables import read_table
from attnlab.errors import InputError
from attnlab.reports.page import Report
from attnlab.runs import RunDir


def _quant_report(run: RunDir) -> Report:
    """The settings, the perplexity table and figure, and the outlier channels left out of the scale."""
    cfg = run.read_config()
    rows = read_table(run.path).to_dict("records")
    outliers = read_table(run.path, "outliers.csv").to_dict("records")
    rep = Report("Fake int8 activation quantisation")
    rep.paragraph(
        f"Run folder: {run.path.name}. Model {cfg['model']}, {cfg['samples']} windows of {cfg['tokens']} tokens per "
        f"domain. Symmetric per-tensor int{cfg['bits']} fake quantisation of each window's activations (scale = "
        f"absmax / {2 ** (cfg['bits'] - 1) - 1}); outlier channels: peak > {cfg['outlier_ratio']} x the median "
        f"channel peak, at most {cfg['max_outliers']} per tensor; 'exclude' keeps them in full precision, 'clip' "
        f"clamps them to the range, 'naive' puts them in the scale. Sites: linear = the input of every Linear in "
        f"the decoder blocks, residual = the hidden state entering each block."
    )
    rep.table(rows, caption="Perplexity per domain and condition")
    rep.figure(run.path / "figures" / "perplexity.png", "Perplexity per condition and domain (log scale)")
    rep.table(
        sorted(outliers, key=lambda r: -float(r["max_ratio"]))[:60],
        caption="Outlier channels left out of the scale (largest peak ratios first, at most 60 rows)",
    )
    return rep


def _window_report(run: RunDir) -> Report:
    """The policies, the perplexity table and figure, and the NLL against the query position."""
    cfg = run.read_config()
    rows = read_table(run.path).to_dict("records")
    rep = Report("Sliding-window KV policy with and without the sink")
    rep.paragraph(
        f"Run folder: {run.path.name}. Model {cfg['model']}, {cfg['samples']} windows of {cfg['tokens']} tokens per "
        f"domain. 'window W': query i sees keys i-W+1..i; 'sink+window W': also keys 0..{cfg['sink_tokens'] - 1} "
        f"(the attention sink); 'full': causal attention through the same 4D mask. Position ids are those of the "
        f"full window. Tail columns: predictions from query positions >= {rows[0]['tail_from'] if rows else '-'}."
    )
    rep.table(rows, caption="Perplexity per domain and policy")
    rep.figure(run.path / "figures" / "perplexity.png", "Perplexity per policy and domain (log scale)")
    rep.figure(run.path / "figures" / "nll_by_position.png", "Mean NLL against the query position")
    return rep


BUILDERS = {"deploy quantize": _quant_report, "deploy window": _window_report}


def write_report(run: RunDir) -> Path:
    """Write `report.html` of the run folder `run`: the page of the deploy command its manifest names."""
    command = run.read_manifest().get("command")
    if command not in BUILDERS:
        raise InputError(f"{run.path}: a run of {command!r}, not of a deploy command ({', '.join(BUILDERS)})")
    return BUILDERS[command](run).write(run.file("report.html"))
