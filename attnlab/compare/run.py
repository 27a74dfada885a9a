"""`attnlab compare` as functions: `compare(CompareConfig(...), out)` writes a comparison run folder;
`write_index(root)` writes `root/index.html`, a page listing every run folder below `root`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlab.compare.collect import RunInfo, find_runs, read_run
from attnlab.compare.config import CompareConfig
from attnlab.compare.figures import relative
from attnlab.compare.page import command_defaults, comparison, key_fields, result_columns, shown
from attnlab.compare.report import PAIR_FILES, write_report
from attnlab.errors import InputError
from attnlab.runs import RunDir, RunResult, open_run, write_bytes


def _table(runs: list[RunInfo], page_dir: Path, defaults: dict[str, dict | None]) -> Any:
    """One row per run: its folder (relative to the page), command, key config fields and final metrics."""
    import pandas as pd

    rows = []
    for r in runs:
        same = [x for x in runs if x.command == r.command]
        row: dict[str, Any] = {"run": relative(r.path, page_dir), "command": r.command, "status": r.status}
        fields = key_fields(same, defaults[r.command])
        row.update({k: shown(r.config.get(k)) for k in fields})
        row.update({title: r.final.get(k) for k, title in result_columns(same, fields, limit=None).items()})
        rows.append(row)
    return pd.DataFrame(rows)


def _save_runs(run: RunDir, runs: list[RunInfo], defaults: dict[str, dict | None]) -> None:
    """runs.json (every run as read, its path relative to the folder; the commands' config defaults) and, for two
    or more scans, the first two scans' heads.csv: all the report reads."""
    keep = ("command", "config", "final", "curves", "status")
    rows = [{"run": relative(r.path, run.path), **{k: getattr(r, k) for k in keep}, "report": r.has_report}
            for r in runs]  # fmt: skip
    scans = [r for r in runs if r.command == "scan"][:2]
    pair = len(scans) == 2 and all((r.path / "heads.csv").is_file() for r in scans)
    for r, name in zip(scans if pair else [], PAIR_FILES):
        write_bytes(run.file(name), (r.path / "heads.csv").read_bytes())
    names = [relative(r.path, run.path) for r in scans] if pair else None
    run.write_json("runs.json", {"runs": rows, "defaults": defaults, **({"scan_pair": names} if pair else {})})


def compare(config: CompareConfig, out: str | Path | None = None, *, mode: str = "new") -> RunResult:
    """Read every run of `config.run_dirs` (one line for a folder that is not a run), then write the comparison
    run folder: runs.json and the scans' heads.csv (what the page reads), runs.csv and report.html (tables per
    command, curves overlaid)."""
    runs = [read_run(d) for d in config.run_dirs]
    defaults = {c: command_defaults(c) for c in dict.fromkeys(r.command for r in runs)}
    with open_run(out, "compare", config, mode=mode, prefix="compare") as run:
        table = _table(runs, run.path, defaults)
        run.write_csv("runs.csv", table.to_dict("records"))
        _save_runs(run, runs, defaults)
        write_report(run)
    return RunResult(run.path, config, {"runs": len(runs), "commands": list(defaults)}, {"runs": table})


def write_index(root: str | Path, title: str | None = None) -> Path:
    """`root/index.html`: one sortable table per command listing every run folder below `root` (with links)."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"--index {root}: no such folder")
    found = find_runs(root)
    if not found:
        raise InputError(f"--index {root}: no attnlab run folder (with manifest.json and config.json) below it")
    runs = [read_run(p) for p in found]
    defaults = {c: command_defaults(c) for c in dict.fromkeys(r.command for r in runs)}
    page = comparison(runs, root, title or f"Runs in {root.resolve().name}", defaults, curves=False)
    return page.write(root / "index.html")


RUNNERS = {"compare": (CompareConfig, compare)}
