"""The sweep's report.html, from the sweep folder only (sweep.csv, trials.json, config.json, view.json: the metric
the run chose to draw, and the figure that `figures.sweep_figures` drew)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from attnlab.reports.page import Report, element_id, words
from attnlab.runs import RunDir
from attnlab.sweep.figures import grid_view, line_view, metric_view, read_sweep


def _metric_views(rep: Report, run: RunDir, table: Any, metric: str, axes: list[str], summary: Any) -> None:
    """The metric against the swept fields `axes` (the seed is averaged over, never an axis: with seeds, `summary`
    holds the mean and 95 % interval, shown in a table and as error bars), the PNG figure and an interactive view."""
    if summary is not None:
        what = f"over {', '.join(axes)}" if axes else "of the whole sweep"
        rep.table(summary.to_dict("records"), caption=f"{words(metric)} {what}: mean over seeds with its 95 % interval")
    png = run.path / "figures" / f"sweep_{metric}.png"
    if png.is_file():
        over = " (mean over seeds, bars: 95 % interval)" if summary is not None else ""
        rep.figure(png, f"{words(metric)} against {' × '.join(axes)}{over}")
    if len(axes) == 1:
        rep.plotly(line_view(table, metric, axes[0], summary), element_id(run.path, "metric"),
                   "Interactive: hover a point for its value (and its interval over seeds)")  # fmt: skip
    elif len(axes) >= 2:
        rep.plotly(grid_view(table, metric, axes[:2]), element_id(run.path, "metric"),
                   f"Interactive: {words(metric)} (mean over the other fields and seeds); hover a cell")  # fmt: skip


def write_report(run: RunDir) -> Path:
    """Write `report.html`: counts, the metric figure and the trial table (links to each trial's folder)."""
    table, command, metric, fields = read_sweep(run)
    rep = Report(f"Sweep of attnlab {command}")
    counts = table["status"].value_counts().to_dict()
    rep.paragraph(
        f"{len(table)} trials: "
        + ", ".join(f"{n} {s}" for s, n in counts.items())
        + ". Each trial's run folder is trials/<trial>/."
    )
    axes, summary = metric_view(table, metric, fields)
    if metric is not None:
        _metric_views(rep, run, table, metric, axes, summary)
    rep.table(table.to_dict("records"), caption="Trials (sweep.csv)")
    links = [
        f'<a href="trials/{html.escape(t)}/report.html">{html.escape(t)}</a>'
        for t in map(str, table["trial"])
        if (run.path / "trials" / t / "report.html").is_file()
    ]
    if links:
        rep.raw("<p>Each trial's report: " + " · ".join(links) + "</p>")
    return rep.write(run.path / "report.html")
