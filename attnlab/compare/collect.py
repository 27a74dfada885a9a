"""What a comparison reads from each run folder (manifest, config, metrics files only; nothing is recomputed).

`find_runs(root)` lists the attnlab run folders under a folder; `read_run(path)` gives a `RunInfo`: the command,
the config's scalar fields, the final metrics (the last metrics.jsonl record, else metrics.json, plus
summary.json's scalars; nested dicts flattened to `a.b`, short number lists to `name[i]`) and the metric curves.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from attnlab.errors import AttnlabError, InputError
from attnlab.runs import RunDir, run_status

MAX_DEPTH = 4  # how deep `find_runs` looks below the root
MAX_LIST = 8  # number lists longer than this are left out of the final metrics
SKIP_DIRS = {"figures", "snapshots", "checkpoints", "traces", "patterns", "final"}


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """One run folder as a comparison sees it."""

    path: Path
    command: str
    config: dict[str, Any]
    final: dict[str, float | str]
    curves: list[dict[str, float | str]]
    status: str = "unknown"  # finished, interrupted, failed, running or unknown (`attnlab.runs.run_status`)
    report: bool | None = None  # whether the run has report.html, as a compare run saw it (None: look now)

    @property
    def has_report(self) -> bool:
        return self.report if self.report is not None else (self.path / "report.html").is_file()


def is_run(path: Path) -> bool:
    return (path / "manifest.json").is_file() and (path / "config.json").is_file()


def find_runs(root: Path, depth: int = MAX_DEPTH) -> list[Path]:
    """Run folders at or below `root` (a run's own subfolders are searched too: a sweep holds trials/<id>/)."""
    found = [root] if is_run(root) else []
    if depth > 0:
        for sub in sorted(p for p in root.iterdir() if p.is_dir() and p.name not in SKIP_DIRS):
            if not sub.name.startswith("."):
                found += find_runs(sub, depth - 1)
    return found


def flatten(record: Any, prefix: str = "") -> dict[str, float | str]:
    """Numbers (and short strings) of a metrics record: dicts give `a.b`, number lists `name[i]`, grids
    `name[i.j]`; longer lists, NaN placeholders (None) and other values are left out."""
    out: dict[str, float | str] = {}
    if isinstance(record, dict):
        for k, v in record.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(record, bool):
        out[prefix] = str(record)
    elif isinstance(record, (int, float)):
        out[prefix] = float(record)
    elif isinstance(record, str) and len(record) <= 40 and prefix:
        out[prefix] = record
    elif isinstance(record, list) and 0 < len(record) <= MAX_LIST:
        for i, v in enumerate(record):
            if _number(v):
                out[f"{prefix}[{i}]"] = float(v)
            elif isinstance(v, list) and len(v) <= MAX_LIST:
                out.update({f"{prefix}[{i}.{j}]": float(x) for j, x in enumerate(v) if _number(x)})
    return out


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _read_optional(run: RunDir, name: str) -> Any:
    """A JSON file of the run, or None when absent."""
    return run.read_json(name) if run.file(name).is_file() else None


def final_metrics(run: RunDir, records: list[dict]) -> dict[str, float | str]:
    """The last metrics.jsonl record, else metrics.json; then summary.json's top-level numbers."""
    source = records[-1] if records else _read_optional(run, "metrics.json")
    out = flatten(source) if isinstance(source, dict) else {}
    summary = _read_optional(run, "summary.json")
    if isinstance(summary, dict):
        out.update({k: float(v) for k, v in summary.items() if _number(v) and k not in out})
    return {k: v for k, v in out.items() if not (isinstance(v, float) and math.isnan(v))}


def _no_metrics(path: Path) -> str:
    """What a metrics.jsonl without a complete line holds: nothing, or one line cut by a kill."""
    text = path.read_text(errors="replace")
    what = "is empty" if not text.strip() else "holds no complete line (its only line was cut off)"
    return f"{path} {what}: the run recorded no metrics to compare; rerun it or leave it out"


def read_run(path: str | Path) -> RunInfo:
    """The `RunInfo` of a run folder; one line if it is not an attnlab run or a file in it is corrupt."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"{path}: no such folder")
    if not is_run(path):
        raise InputError(f"{path} is not an attnlab run folder (no manifest.json and config.json)")
    run = RunDir(path)
    try:
        command = str(run.read_manifest().get("command") or "?")
        config = run.read_config()
        records = run.metrics()
    except AttnlabError as exc:
        raise InputError(f"{path}: {exc}") from None
    if run.metrics_path.is_file() and not records:
        raise InputError(_no_metrics(run.metrics_path))
    curves = [flatten(r) for r in records if isinstance(r.get("step"), (int, float))]
    return RunInfo(path, command, config if isinstance(config, dict) else {}, final_metrics(run, records),
                   curves if len(curves) >= 2 else [], run_status(path))  # fmt: skip
