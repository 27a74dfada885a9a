"""The report.html of a compare run, from its folder only: `runs.json` (each run as the comparison read it, with
its path relative to the folder, and the commands' config defaults) and, for two scans, their saved heads.csv
tables (`heads_first.csv`, `heads_second.csv`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlab.compare.collect import RunInfo
from attnlab.compare.figures import scan_pair_figure
from attnlab.compare.page import comparison
from attnlab.runs import RunDir

PAIR_FILES = ("heads_first.csv", "heads_second.csv")


def _run_info(run: RunDir, row: dict[str, Any]) -> RunInfo:
    """A `RunInfo` back from one runs.json entry (its path resolved against the compare folder)."""
    fields = ("command", "config", "final", "curves", "status", "report")
    return RunInfo(run.path / row["run"], **{k: row[k] for k in fields})


def _pair(run: RunDir, names: list[str] | None) -> dict | None:
    """The interactive view of the two scans whose heads.csv the run saved (None when it saved none)."""
    import pandas as pd

    if not names or not all(run.file(name).is_file() for name in PAIR_FILES):
        return None
    first, second = (pd.read_csv(run.file(name)) for name in PAIR_FILES)
    return scan_pair_figure(first, second, names)


def write_report(run: RunDir) -> Path:
    """Write `report.html`: one table per command, the first two scans side by side, the curves overlaid."""
    saved = run.read_json("runs.json")
    runs = [_run_info(run, row) for row in saved["runs"]]
    page = comparison(runs, run.path, run.read_config()["title"], saved["defaults"], _pair(run, saved.get("scan_pair")))
    return page.write(run.file("report.html"))
