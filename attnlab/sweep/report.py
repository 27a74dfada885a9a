"""The sweep's report.html, from the sweep folder only (sweep.csv, trials.json, config.json)."""

from __future__ import annotations

import html
from pathlib import Path

from attnlab.report import Report
from attnlab.runs import RunDir
from attnlab.sweep.figures import metric_figure, pick_metric, swept_fields


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
        fig = metric_figure(table, metric, swept, run.figure_path(f"sweep_{metric}"))
        if fig is not None:
            rep.figure(fig, f"{metric} against {' × '.join(swept)}")
    rep.table(table.to_dict("records"), caption="Trials (sweep.csv)")
    links = [
        f'<a href="trials/{html.escape(t)}/report.html">{html.escape(t)}</a>'
        for t in map(str, table["trial"])
        if (run.path / "trials" / t / "report.html").is_file()
    ]
    if links:
        rep.raw("<p>Each trial's report: " + " · ".join(links) + "</p>")
    return rep.write(run.path / "report.html")
