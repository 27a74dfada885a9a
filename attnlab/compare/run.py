"""`attnlab compare` as functions: `compare(CompareConfig(...), out)` writes a comparison run folder;
`write_index(root)` writes `root/index.html`, a page listing every run folder below `root`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlab.compare.collect import RunInfo, find_runs, read_run
from attnlab.compare.config import CompareConfig
from attnlab.compare.report import comparison, key_fields, relative, result_columns, shown
from attnlab.errors import InputError
from attnlab.runs import RunResult, open_run


def _table(runs: list[RunInfo], page_dir: Path) -> Any:
    """One row per run: its folder (relative to the page), command, key config fields and final metrics."""
    import pandas as pd

    rows = []
    for r in runs:
        same = [x for x in runs if x.command == r.command]
        row: dict[str, Any] = {"run": relative(r.path, page_dir), "command": r.command, "status": r.status}
        fields = key_fields(same)
        row.update({k: shown(r.config.get(k)) for k in fields})
        row.update({title: r.final.get(k) for k, title in result_columns(same, fields, limit=None).items()})
        rows.append(row)
    return pd.DataFrame(rows)


def compare(config: CompareConfig, out: str | Path | None = None, *, mode: str = "new") -> RunResult:
    """Read every run of `config.run_dirs` (one line for a folder that is not a run), then write the comparison
    page into a new run folder: report.html (tables per command, curves overlaid) and runs.csv."""
    runs = [read_run(d) for d in config.run_dirs]
    with open_run(out, "compare", config, mode=mode, prefix="compare") as run:
        table = _table(runs, run.path)
        run.write_csv("runs.csv", table.to_dict("records"))
        comparison(runs, run.path, config.title).write(run.file("report.html"))
    commands = list(dict.fromkeys(r.command for r in runs))
    return RunResult(run.path, config, {"runs": len(runs), "commands": commands}, {"runs": table})


def write_index(root: str | Path, title: str | None = None) -> Path:
    """`root/index.html`: one sortable table per command listing every run folder below `root` (with links)."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"--index {root}: no such folder")
    found = find_runs(root)
    if not found:
        raise InputError(f"--index {root}: no attnlab run folder (with manifest.json and config.json) below it")
    runs = [read_run(p) for p in found]
    page = comparison(runs, root, title or f"Runs in {root.resolve().name}", curves=False)
    return page.write(root / "index.html")


RUNNERS = {"compare": (CompareConfig, compare)}
