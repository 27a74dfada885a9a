"""Atomic files of a run folder: every write goes to a temporary file and is renamed into place, and JSON-lines
readers drop a last line that a `kill -9` cut (the run layer's I/O; `attnlab.runs.folder` is the folder's life)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import math
import os
import re
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.errors import InputError

STEPPED = ("step",)  # what every metrics line of a training run holds (`read_metrics`: `run.metrics(STEPPED)`)


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
        # a field marked metadata={"omit_if_default": True} is left out at its default (new options keep old hashes)
        d = dataclasses.asdict(obj)
        for f in dataclasses.fields(obj):
            if f.metadata.get("omit_if_default") and d[f.name] == f.default:
                del d[f.name]
        return to_jsonable(d)
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


# --- atomic writes ------------------------------------------------------------------------------------------
class WriteError(OSError):
    """An OSError while writing a file (a full disk, no permission, a name too long); `filename` is the file that
    was being written, never the temporary one. The CLI prints it as one line naming that file."""


def _tmp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def write_failed(exc: OSError, path: str | Path) -> WriteError:
    """`exc` as a WriteError naming `path` (an error already naming its file is kept as it is)."""
    if isinstance(exc, WriteError):
        return exc
    return WriteError(exc.errno or 0, exc.strerror or str(exc), str(path))


def _as_write_error(exc: BaseException, path: str | Path) -> WriteError | None:
    """An OSError, or a safetensors error that carries an OS error code, as a WriteError naming `path`."""
    if isinstance(exc, OSError):
        return write_failed(exc, path)
    code = re.search(r"os error (\d+)", str(exc)) if type(exc).__name__ == "SafetensorError" else None
    return WriteError(int(code[1]), os.strerror(int(code[1])), str(path)) if code else None


def _write_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_all(tmp: Path, data: bytes) -> None:
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        _write_fd(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write `data` atomically: a temporary file in the same folder, flushed, then renamed over `path`. On any
    failure the temporary file is removed; an OSError comes back as a `WriteError` naming `path`."""
    path = Path(path)
    tmp = _tmp_path(path)
    made: list[Path] = []
    try:
        made = _make_parents(path.parent)
        _write_all(tmp, data)
        tmp.replace(path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
            for folder in reversed(made):  # the folders this call made, innermost first
                folder.rmdir()
        if isinstance(exc, OSError):
            raise write_failed(exc, path) from exc
        raise
    return path


def _make_parents(folder: Path) -> list[Path]:
    """Make `folder` and its missing parents; returns those it made, outermost first."""
    missing, p = [], folder
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    folder.mkdir(parents=True, exist_ok=True)
    return missing[::-1]


@contextlib.contextmanager
def atomic_folder(folder: str | Path) -> Iterator[Path]:
    """Build a folder atomically: yields `folder`.tmp to fill; on success it replaces `folder`, on any failure it
    is removed (an OSError comes back as a `WriteError` naming `folder`)."""
    folder = Path(folder)
    tmp = folder.with_name(folder.name + ".tmp")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        yield tmp
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        error = _as_write_error(exc, folder)
        if error is not None:
            raise error from exc
        raise


def write_text(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8) atomically."""
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, obj: Any) -> Path:
    """Write `obj` as indented JSON, atomically."""
    return write_text(path, json.dumps(to_jsonable(obj), indent=2) + "\n")


def save_npy(path: str | Path, array: np.ndarray) -> Path:
    """Save one array as `.npy`, atomically."""
    import io

    buf = io.BytesIO()
    np.save(buf, np.asarray(array), allow_pickle=False)
    return write_bytes(path, buf.getvalue())


def read_json(path: str | Path, what: str = "file") -> Any:
    """Read a JSON file, or raise one line naming the file when it is missing or corrupt."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{what} {path} not found")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{what} {path} is corrupt ({exc.__class__.__name__}: {exc}); restore or delete it") from None
    except RecursionError:  # e.g. 100,000 nested `[`: json recurses once per level
        raise InputError(f"{what} {path} is corrupt (nested too deeply to read); restore or delete it") from None


def read_jsonl(path: str | Path) -> list[dict]:
    """Read a JSON-lines file (absent: []). A cut-off last line (a `kill -9` mid-write) is dropped; a corrupt
    line elsewhere, or one that is not a JSON object, is an error naming the file and line."""
    return [row for _, row in _jsonl_lines(Path(path))]


def _jsonl_lines(path: Path) -> list[tuple[int, dict]]:
    """(line number, object) of each complete line of a JSON-lines file; see `read_jsonl`."""
    if not path.exists():
        return []
    text = path.read_text(errors="replace")
    lines = text.split("\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            if i == last and not text.endswith("\n"):
                break  # the last line was being written when the process died
            raise InputError(f"{path} line {i + 1} is corrupt; restore or delete the file") from None
        if not isinstance(row, dict):
            raise InputError(f"{path} line {i + 1} is not a JSON object ({type(row).__name__}); restore or delete it")
        rows.append((i + 1, row))
    return rows


def read_metrics(path: str | Path, required: tuple[str, ...] = ()) -> list[dict]:
    """The one reader of a run's `metrics.jsonl` (`RunDir.metrics`): the lines of `read_jsonl`, each checked to
    hold the `required` keys. Lines that record steps (training runs: the loop writes "step" on every line) must
    each hold an integer "step" >= 0, whether or not the caller asked for it. A bad line is refused in one line
    naming the file and line, so a command that reads the metrics first refuses before any work."""
    path = Path(path)
    rows = _jsonl_lines(path)
    steps = ("step",) if any("step" in row for _, row in rows) else ()
    need = tuple(dict.fromkeys((*required, *steps)))
    for number, row in rows:
        _check_metrics_line(row, need, f"{path} line {number}")
    return [row for _, row in rows]


def _check_metrics_line(row: dict, need: tuple[str, ...], where: str) -> None:
    missing = [k for k in need if k not in row]
    if missing:
        names = ", ".join(f'"{k}"' for k in missing)
        raise InputError(f"{where} has no {names} (every metrics line has one); restore or delete that line")
    step = row.get("step", 0)
    if "step" in need and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
        raise InputError(f'{where}: "step" must be an integer >= 0, got {step!r}; restore or delete that line')


def write_jsonl(path: str | Path, rows: Iterable[dict]) -> Path:
    """Write rows as JSON lines, atomically (used to rewrite a metrics file on resume)."""
    return write_text(path, "".join(json.dumps(to_jsonable(r)) + "\n" for r in rows))
