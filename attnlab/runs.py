"""Run folders: every command writes its resolved config, metrics and figures into one folder.

Layout: `config.json`, `manifest.json` (seed, versions, git SHA), `metrics.jsonl` (one JSON object per line),
`figures/*.png`, `report.html`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable

import numpy as np


def default_run_dir(study: str, root: str | Path = "runs") -> Path:
    """`runs/<study>-<YYYYmmdd-HHMMSS>`; a numeric suffix keeps it unique."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(root) / f"{study}-{stamp}"
    path, n = base, 1
    while path.exists():
        path, n = Path(f"{base}-{n}"), n + 1
    return path


def to_jsonable(obj: Any) -> Any:
    """Convert dataclasses, numpy/torch scalars and arrays, Paths and non-finite floats into JSON values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "detach") and hasattr(obj, "cpu"):  # torch tensor
        obj = obj.detach().cpu().numpy()
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj


def write_json(path: str | Path, obj: Any) -> Path:
    """Write `obj` as indented JSON (atomically: temp file then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(to_jsonable(obj), indent=2) + "\n")
    tmp.replace(path)
    return path


def read_jsonl(path: str | Path) -> list[dict]:
    """Read a JSON-lines file into a list of dicts (an absent file gives [])."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def git_sha() -> str | None:
    """The current git commit of the attnlab checkout, if any."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None
    except Exception:  # noqa: BLE001 - no git is fine
        return None


def environment_manifest() -> dict:
    """Versions of Python and the main libraries, the platform and the git SHA."""
    from importlib.metadata import PackageNotFoundError, version

    info = {"python": sys.version.split()[0], "platform": platform.platform(), "numpy": np.__version__,
            "git_sha": git_sha(), "created": _dt.datetime.now().isoformat(timespec="seconds")}
    for package in ("torch", "transformers", "scipy", "attnlab"):
        try:  # read from the installed metadata: importing transformers just for its version takes seconds
            info[package] = version(package)
        except PackageNotFoundError:
            pass
    return info


class RunDir:
    """A run folder with helpers to write the config, manifest, metrics and figures.

    `RunDir(path)` creates the folder; `figure_path(name)` gives `figures/<name>.png`.
    """

    def __init__(self, path: str | Path, study: str = "run") -> None:
        self.path = Path(path) if path is not None else default_run_dir(study)
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "figures").mkdir(exist_ok=True)

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    def write_config(self, config: Any) -> Path:
        return write_json(self.path / "config.json", config)

    def write_manifest(self, seed: int | None, **extra: Any) -> Path:
        return write_json(self.path / "manifest.json", {"seed": seed, **environment_manifest(), **extra})

    def write_json(self, name: str, obj: Any) -> Path:
        return write_json(self.path / name, obj)

    def append_metrics(self, record: dict) -> None:
        with open(self.metrics_path, "a") as f:
            f.write(json.dumps(to_jsonable(record)) + "\n")

    def reset_metrics(self, keep_until_step: int | None = None) -> None:
        """Drop metric lines (all, or those with step > keep_until_step) - used when resuming."""
        if keep_until_step is None:
            self.metrics_path.unlink(missing_ok=True)
            return
        kept = [r for r in read_jsonl(self.metrics_path) if r.get("step", -1) <= keep_until_step]
        self.metrics_path.write_text("".join(json.dumps(r) + "\n" for r in kept))

    def metrics(self) -> list[dict]:
        return read_jsonl(self.metrics_path)

    def figure_path(self, name: str) -> Path:
        return self.path / "figures" / f"{name}.png"

    def write_csv(self, name: str, rows: Iterable[dict]) -> Path:
        import csv

        rows = list(rows)
        path = self.path / name
        with open(path, "w", newline="") as f:
            if rows:
                writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
                writer.writeheader()
                for r in rows:
                    writer.writerow(to_jsonable(r))
        return path

    def __str__(self) -> str:
        return str(self.path)
