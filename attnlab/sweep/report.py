"""The sweep's report.html, from the sweep folder only (sweep.csv, trials.json, config.json)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from attnlab.report import Report, element_id, heatmap, rounded, words
from attnlab.runs import RunDir
from attnlab.sweep.aggregate import SEED, axes_without_seed, seed_summary
from attnlab.sweep.figures import metric_figure, pick_metric, swept_fields


def add_metric_views(rep: Report, run: RunDir, table: Any, metric: str, swept: list[str]) -> None:
    """The metric against the swept fields: the seed is averaged over, never an axis (mean and 95 % interval in
    a table and as error bars), with an interactive line view for one axis and the PNG figure."""
    axes = axes_without_seed(swept)
    seeds = SEED in swept
    summary = seed_summary(table, metric, axes) if seeds else None
    if summary is not None:
        what = f"over {', '.join(axes)}" if axes else "of the whole sweep"
        rep.table(summary.to_dict("records"), caption=f"{words(metric)} {what}: mean over seeds with its 95 % interval")
    fig = metric_figure(table, metric, axes, run.figure_path(f"sweep_{metric}"), summary)
    if fig is not None:
        over = " (mean over seeds, bars: 95 % interval)" if seeds else ""
        rep.figure(fig, f"{words(metric)} against {' × '.join(axes)}{over}")
    if len(axes) == 1:
        rep.plotly(line_view(table, metric, axes[0], summary), element_id(run.path, "metric"),
                   "Interactive: hover a point for its value (and its interval over seeds)")  # fmt: skip
    elif len(axes) >= 2:
        rep.plotly(grid_view(table, metric, axes[:2]), element_id(run.path, "metric"),
                   f"Interactive: {words(metric)} (mean over the other fields and seeds); hover a cell")  # fmt: skip


def line_view(table: Any, metric: str, axis: str, summary: Any) -> dict:
    """A plotly line of `metric` against `axis` (category axis, as the values were given); with seeds, the mean
    and 95 % interval as error bars."""
    if summary is not None:
        x, y, err = summary[axis].astype(str).tolist(), summary[f"{metric} mean"], summary["± (95%)"]
        trace = {"type": "scatter", "mode": "lines+markers", "x": x, "y": rounded(y),
                 "error_y": {"type": "data", "array": rounded(err), "visible": True}}  # fmt: skip
    else:
        done = table[table["status"] == "done"]
        mean = done.groupby(axis)[metric].mean()
        trace = {"type": "scatter", "mode": "lines+markers", "x": [str(v) for v in mean.index],
                 "y": rounded(mean.to_numpy(dtype=float))}  # fmt: skip
    layout = {"xaxis": {"title": {"text": axis}, "type": "category"}, "yaxis": {"title": {"text": words(metric)}},
              "margin": {"t": 30}, "height": 380}  # fmt: skip
    return {"data": [trace], "layout": layout}


def grid_view(table: Any, metric: str, axes: list[str]) -> dict:
    """A plotly heat map of `metric` over two swept fields (mean over the rest), values as given on the axes."""
    done = table[table["status"] == "done"]
    grid = done.pivot_table(index=axes[0], columns=axes[1], values=metric, aggfunc="mean")
    hover = f"{axes[0]} %{{y}}<br>{axes[1]} %{{x}}<br>{words(metric)} %{{z:.4g}}<extra></extra>"
    x, y = [str(v) for v in grid.columns], [str(v) for v in grid.index]
    fig = heatmap(grid.to_numpy(dtype=float), words(metric), x, y, hovertemplate=hover)
    fig["layout"]["xaxis"] = {"title": {"text": axes[1]}, "type": "category", "automargin": True}
    fig["layout"]["yaxis"] = {"title": {"text": axes[0]}, "type": "category", "autorange": "reversed"}
    fig["layout"]["height"] = 420
    return fig


def write_report(folder: str | Path) -> Path:
    """Write `report.html`: counts, the metric figure and the trial table (links to each trial's folder)."""
    import pandas as pd

    run = RunDir(folder)
    table = pd.read_csv(run.path / "sweep.csv")
    fields = run.read_json("trials.json")["fields"]
    command = run.read_config()["spec"]["command"]
    rep = Report(f"Sweep of attnlab {command}")
    counts = table["status"].value_counts().to_dict()
    rep.paragraph(
        f"{len(table)} trials: "
        + ", ".join(f"{n} {s}" for s, n in counts.items())
        + ". Each trial's run folder is trials/<trial>/."
    )
    metric = pick_metric(table, command, fields)
    swept = swept_fields(table, fields)
    if metric is not None:
        add_metric_views(rep, run, table, metric, swept)
    rep.table(table.to_dict("records"), caption="Trials (sweep.csv)")
    links = [
        f'<a href="trials/{html.escape(t)}/report.html">{html.escape(t)}</a>'
        for t in map(str, table["trial"])
        if (run.path / "trials" / t / "report.html").is_file()
    ]
    if links:
        rep.raw("<p>Each trial's report: " + " · ".join(links) + "</p>")
    return rep.write(run.path / "report.html")
