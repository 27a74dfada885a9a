"""`attnlab.load_run(path)`: the `RunResult` of a finished run folder, read back for a notebook (issue 19).

The config comes back as the command's frozen config class (`config.json`, through the registry); the summary
from the first of `summary.json`, `train_summary.json`, `metrics.json` present; the tables lazily: `metrics`
from `metrics.jsonl`, and one DataFrame per CSV file in the folder and in `tables/`, named by its stem.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlab.errors import InputError
from attnlab.runs import LOCK_NAME, RunDir, RunResult, read_json

SUMMARY_FILES = ("summary.json", "train_summary.json", "metrics.json")


def _csv_table(path: Path) -> Any:
    def read() -> Any:
        import pandas as pd

        try:
            return pd.read_csv(path)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise InputError(f"table {path} is corrupt ({type(exc).__name__}); restore or delete it") from None

    return read


def _metrics_table(run: RunDir) -> Any:
    def read() -> Any:
        import pandas as pd

        return pd.DataFrame(run.metrics())

    return read


def _tables(run: RunDir) -> dict[str, Any]:
    tables: dict[str, Any] = {}
    if run.metrics_path.exists():
        tables["metrics"] = _metrics_table(run)
    for folder in (run.path, run.path / "tables"):
        for csv in sorted(folder.glob("*.csv")) if folder.is_dir() else []:
            tables.setdefault(csv.stem, _csv_table(csv))
    return tables


def _held(path: Path) -> bool:
    """Whether a live process holds the folder's lock (a lock left by a killed run does not count)."""
    from attnlab.runs.folder import _alive

    try:
        pid = int((path / LOCK_NAME).read_text().strip() or 0)
    except (OSError, ValueError):
        return False
    return bool(pid) and _alive(pid)


def load_run(path: str | Path) -> RunResult:
    """The `RunResult` (path, config, summary, tables) of the run folder `path`; one line if it is not one."""
    from attnlab.core.registry import resolve
    from attnlab.runs.configs import config_from_dict

    run = RunDir(path)
    if not run.path.is_dir():
        raise InputError(f"run folder {run.path} not found")
    if _held(run.path):
        raise InputError(f"{run.path} is being written by a running attnlab command; load it when it has finished")
    command = run.read_manifest().get("command")
    if not command:
        raise InputError(f"{run.path}/manifest.json names no command; it was not written by this attnlab")
    if command == "demo":
        raise InputError(f"{run.path} is a demo folder; load one of its study folders instead")
    config_cls, _ = resolve(command)
    config: Any = config_from_dict(config_cls, run.read_config())
    summary_file = next((run.path / n for n in SUMMARY_FILES if (run.path / n).is_file()), None)
    summary = read_json(summary_file, "run summary") if summary_file is not None else {}
    return RunResult(run.path, config, summary if isinstance(summary, dict) else {"summary": summary}, _tables(run))
