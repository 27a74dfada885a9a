"""Run folders that never lose data (the run layer every command writes through).

A run folder holds `config.json` (the resolved config), `manifest.json` (command, argv, seed, versions, git SHA,
config hash), metrics (`metrics.jsonl` or JSON/CSV tables), arrays (`.npy`/safetensors), `figures/` and
`report.html`. Rules, enforced by `open_run`:

- a new run never writes into a non-empty folder; `mode="resume"` continues a run of the same command and
  `mode="overwrite"` replaces an earlier attnlab run (never an arbitrary folder);
- a lock file (`.attnlab.lock`, holding the owner's pid) keeps two processes out of one folder;
- every file is written atomically (temporary file, then rename), and a JSON-lines file whose last line was cut
  by a `kill -9` is read without that line;
- a command that fails before writing anything leaves no empty folder behind (nor the parents it created), and
  a new run that a full disk stops leaves nothing behind unless it saved a point to continue from;
- `--overwrite` sets the earlier run aside in `.<name>.replaced-<pid>` until the new run ends; one that a `kill -9`
  left there is put back by the next command (`recover_replaced`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import glob
import hashlib
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.errors import InputError

LOCK_NAME = ".attnlab.lock"
REPLACED = ".replaced-"  # `.<run>.replaced-<pid>`: an earlier run set aside by --overwrite until the new one ends
DISCARD = ".discard-"  # `.<run>.discard-<pid>`: a folder being deleted
MODES = ("new", "resume", "overwrite")
_BOOKKEEPING = frozenset({LOCK_NAME, "figures"})
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


# --- provenance ------------------------------------------------------------------------------------------------
def git_sha() -> str | None:
    """The current git commit of the attnlab checkout, if any."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).resolve().parent
        )
        return out.stdout.strip() or None
    except Exception:  # noqa: BLE001 - no git is fine
        return None


def environment_manifest() -> dict:
    """Versions of Python and the main libraries, the platform and the git SHA."""
    from importlib.metadata import PackageNotFoundError, version

    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "numpy": np.__version__,
        "git_sha": git_sha(),
        "created": _dt.datetime.now().isoformat(timespec="seconds"),
    }
    for package in ("torch", "transformers", "scipy", "attnlab"):
        try:  # read from the installed metadata: importing transformers just for its version takes seconds
            info[package] = version(package)
        except PackageNotFoundError:
            pass
    return info


def config_hash(config: Any) -> str:
    """A stable 16-hex-digit hash of a config (its JSON form with sorted keys)."""
    text = json.dumps(to_jsonable(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --- the run folder -------------------------------------------------------------------------------------------
class RunDir:
    """A run folder: helpers that write the config, manifest, metrics, arrays and figures atomically.

    Open one for writing with `open_run`; `RunDir(path)` alone only reads (or writes into a folder that
    `open_run` already holds).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        # True while this run replaces an earlier one set aside by --overwrite: if the run fails, this folder is
        # discarded and the earlier run put back (so a failure message must not point into this folder)
        self.replacing = False
        # set (to how, e.g. "continue it with --resume") once the run saved a point a later command continues from:
        # a new run that a full disk stops is then kept, not removed (`open_run`)
        self.resume_hint: str | None = None

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    def file(self, name: str) -> Path:
        return self.path / name

    def write_config(self, config: Any) -> Path:
        return write_json(self.path / "config.json", config)

    def read_config(self) -> dict:
        recover_replaced(self.path)
        return read_json(self.path / "config.json", "run config")

    def write_manifest(self, seed: int | None, **extra: Any) -> Path:
        old = self.read_manifest() if (self.path / "manifest.json").exists() else {}
        keep = {k: old[k] for k in ("command", "argv", "config_hash") if k in old}
        return write_json(self.path / "manifest.json", {**keep, "seed": seed, **environment_manifest(), **extra})

    def read_manifest(self) -> dict:
        recover_replaced(self.path)
        return read_json(self.path / "manifest.json", "run manifest")

    def write_json(self, name: str, obj: Any) -> Path:
        return write_json(self.path / name, obj)

    def read_json(self, name: str) -> Any:
        return read_json(self.path / name, "run file")

    def save_npy(self, name: str, array: np.ndarray) -> Path:
        return save_npy(self.path / name, array)

    def append_metrics(self, record: dict) -> None:
        """Append one JSON line; a line cut by a crash is dropped when read back, and a failed write (a full disk)
        leaves the file as it was."""
        line = (json.dumps(to_jsonable(record)) + "\n").encode("utf-8")
        try:
            fd = os.open(self.metrics_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        except OSError as exc:
            raise write_failed(exc, self.metrics_path) from exc
        size = os.fstat(fd).st_size
        try:
            _write_fd(fd, line)
        except OSError as exc:  # a full disk: no half line stays behind to corrupt the lines after it
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise write_failed(exc, self.metrics_path) from exc
        finally:
            os.close(fd)

    def reset_metrics(self, keep_until_step: int | None = None) -> None:
        """Drop metric lines (all, or those with step > keep_until_step) - used when resuming."""
        if keep_until_step is None:
            self.metrics_path.unlink(missing_ok=True)
            return
        write_jsonl(self.metrics_path, [r for r in self.metrics(("step",)) if r["step"] <= keep_until_step])

    def metrics(self, required: tuple[str, ...] = ()) -> list[dict]:
        """The lines of metrics.jsonl, validated by `read_metrics` (each holding the `required` keys)."""
        return read_metrics(self.metrics_path, required)

    def figure_path(self, name: str) -> Path:
        (self.path / "figures").mkdir(parents=True, exist_ok=True)
        return self.path / "figures" / f"{name}.png"

    def write_csv(self, name: str, rows: Iterable[dict]) -> Path:
        import csv
        import io

        rows = list(rows)
        buf = io.StringIO()
        if rows:
            cols: list[str] = []
            for r in rows:
                cols += [k for k in r if k not in cols]
            writer = csv.DictWriter(buf, fieldnames=cols)
            writer.writeheader()
            for r in rows:
                writer.writerow(to_jsonable(r))
        return write_text(self.path / name, buf.getvalue())

    def __str__(self) -> str:
        return str(self.path)

    def __fspath__(self) -> str:
        return str(self.path)


def _is_run_folder(path: Path) -> bool:
    return (path / "manifest.json").is_file() or (path / "config.json").is_file()


def _contents(path: Path) -> list[str]:
    return sorted(
        p.name
        for p in path.iterdir()
        if p.name not in _BOOKKEEPING or p.name == "figures" and any((path / "figures").iterdir())
    )


def check_out_folder(path: Path, mode: str, command: str) -> None:
    """Refuse, with one line, an `--out` that would lose or mix data; see `open_run` for the rules. An earlier
    run that a killed `--overwrite` left set aside beside `path` (or inside it) is first put back (`recover_replaced`).
    """
    if mode not in MODES:
        raise InputError(f"run mode must be one of {', '.join(MODES)}, got {mode!r}")
    recover_replaced(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"--out {path} is a file, not a folder; choose a folder path")
    parent = next((p for p in [path, *path.parents] if p.exists()), Path("."))
    if not parent.is_dir():
        raise InputError(f"--out {path}: {parent} is a file, not a folder; choose a folder path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"--out {path}: {parent} is not writable")
    busy = path.is_dir() and _contents(path)
    if mode == "new" and busy:
        raise InputError(
            f"--out {path} is not empty; pass --overwrite to replace that run, --resume where the command can "
            "continue it, or choose a new folder"
        )
    if mode == "overwrite" and busy and not _is_run_folder(path):
        raise InputError(f"--overwrite refuses {path}: it is not an attnlab run folder (no manifest.json)")
    if mode == "resume":
        if not _is_run_folder(path):
            raise InputError(f"--resume needs --out pointing at an existing run folder; {path} holds none")
        old = read_json(path / "manifest.json", "run manifest") if (path / "manifest.json").exists() else {}
        if old.get("command") not in (None, command):
            raise InputError(f"--resume: {path} is a run of `attnlab {old['command']}`, not `attnlab {command}`")


def _acquire_lock(path: Path) -> Path:
    lock = path / LOCK_NAME
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                pid = int(lock.read_text().strip() or 0)
            except (OSError, ValueError):
                pid = 0
            if pid and _alive(pid):
                raise InputError(
                    f"{path} is in use by another attnlab process (pid {pid}); wait for it or choose another --out"
                ) from None
            lock.unlink(missing_ok=True)  # stale: its owner died
            continue
        try:
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
        except OSError as exc:  # a full disk: no empty lock file is left behind
            lock.unlink(missing_ok=True)
            raise write_failed(exc, lock) from None
        return lock
    raise InputError(f"could not lock {path}")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _make_folder(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".attnlab-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise InputError(f"--out {path}: cannot write there ({exc.strerror or exc})") from None


def _set_aside(path: Path) -> Path | None:
    """For --overwrite: move the earlier run out of the way (kept until the new run succeeds); None if empty."""
    if not path.is_dir() or not _contents(path):
        return None
    lock = _acquire_lock(path)  # nobody else may be using the run we replace
    backup = path.with_name(f".{path.name}{REPLACED}{os.getpid()}")
    if backup.exists():  # left by an earlier process that had our pid
        lock.unlink(missing_ok=True)
        raise InputError(_orphan_message(path, backup, os.getpid()))
    path.rename(backup)
    (backup / lock.name).unlink(missing_ok=True)
    return backup


def _discard(path: Path) -> None:
    """Delete `path`: renamed first to `.name.discard-PID` (atomic), so a kill mid-delete leaves only a folder that
    `recover_replaced` knows to be garbage, never a half-deleted run under a run's name."""
    if not path.exists():
        return
    trash = path.with_name(f".{path.name}{DISCARD}{os.getpid()}")
    shutil.rmtree(trash, ignore_errors=True)
    path.rename(trash)
    shutil.rmtree(trash, ignore_errors=True)


def _put_back(backup: Path, path: Path) -> None:
    """Replace `path` (an unfinished replacement run) by the run set aside in `backup`."""
    _discard(path)
    backup.rename(path)


def _leftovers(path: Path, marker: str) -> list[tuple[Path, Path, int]]:
    """(target, leftover, pid) for folders named `.<target>{marker}<pid>` whose process is gone, beside `path`
    (for `path` itself) and inside `path`. Our own pid counts as alive (a run this process is replacing)."""
    found = []
    beside = path.parent.glob(f".{glob.escape(path.name)}{marker}*") if path.parent.is_dir() else []
    inside = path.glob(f".*{marker}*") if path.is_dir() else []
    for leftover in [*beside, *inside]:
        name, _, pid = leftover.name[1:].rpartition(marker)
        if name and pid.isdigit() and leftover.is_dir() and not _alive(int(pid)):
            found.append((leftover.with_name(name), leftover, int(pid)))
    return found


def _unfinished(target: Path, pid: int) -> bool:
    """Whether `target` is absent, empty, or the run that process `pid` was writing when it died."""
    if not target.is_dir() or not _contents(target):
        return True
    try:
        return (target / LOCK_NAME).read_text().strip() == str(pid)
    except OSError:
        return False


def recover_replaced(path: str | Path) -> None:
    """Put back an earlier run that an `--overwrite` killed mid-run (kill -9) left in `.<name>.replaced-<pid>`.

    The earlier run returns when its replacement is absent, empty or the dead process's own unfinished run (its
    lock names that pid), the same as a failed `--overwrite` that could clean up. When another run has since
    taken the name, nothing is moved and the command is refused with how to restore it. Deletions that a kill
    cut short (`.<name>.discard-<pid>`) are finished.
    """
    path = Path(path)
    for _, trash, _ in _leftovers(path, DISCARD):
        shutil.rmtree(trash, ignore_errors=True)
    for target, backup, pid in _leftovers(path, REPLACED):
        if not _unfinished(target, pid):
            raise InputError(_orphan_message(target, backup, pid))
        _put_back(backup, target)


def _orphan_message(target: Path, backup: Path, pid: int) -> str:
    return (
        f"{backup} holds the earlier run of {target}, set aside by an --overwrite (pid {pid}) that was killed; "
        f"{target} is now another run: move that away and `mv {backup} {target}` to restore it, or delete {backup}"
    )


def device_info(config: Any) -> dict:
    """The manifest's record of the device a config computes on ({} for a config without one). Resolving it
    refuses, in one line, `cuda` without CUDA and `cuda` for a command that computes on the cpu only."""
    if not isinstance(getattr(config, "device", None), str):
        return {}
    from attnlab.device import describe, resolve

    return describe(resolve(config.device, gpu=getattr(config, "CPU_ONLY", None)))


def _write_provenance(
    run: RunDir, command: str, config: Any, seed: int | None, argv: list[str] | None, device: dict
) -> None:
    run.write_config(config)
    provenance = {
        "command": command,
        "argv": argv if argv is not None else sys.argv[1:],
        "config_hash": config_hash(config),
        "seed": seed,
        **device,
    }
    write_json(run.path / "manifest.json", {**provenance, **environment_manifest()})


@contextlib.contextmanager
def open_run(
    out: str | Path | None,
    command: str,
    config: Any,
    *,
    mode: str = "new",
    seed: int | None = None,
    argv: list[str] | None = None,
    prefix: str | None = None,
) -> Iterator[RunDir]:
    """Hold a run folder for one command: check it, lock it, record the command and config, release it.

    out: the folder (None: `runs/<prefix>-<time>`). mode: "new" (the folder must be absent or empty), "resume"
    (an earlier run of the same `command`; the study checks that the configs agree) or "overwrite" (an earlier
    attnlab run, replaced only once the new run succeeds: if the body raises, the earlier run is put back).
    Writes `config.json` and `manifest.json` (command, argv, config hash, seed, versions) unless resuming. A new
    run that fails before writing results, or that a full disk stops before it saved a point to continue from,
    leaves nothing it created (`_end_failed`); a resumed run's folder is never removed."""
    device = device_info(config)  # before the folder: a missing GPU is one line and leaves nothing behind
    path = Path(out) if out is not None else default_run_dir(prefix or command.replace(" ", "-"))
    check_out_folder(path, mode, command)
    backup = _set_aside(path) if mode == "overwrite" else None
    created = _missing_folders(path)
    try:
        _make_folder(path)
        earlier = None if mode == "resume" else frozenset(os.listdir(path))  # a new run's folder held no run
        lock = _acquire_lock(path)
    except BaseException:  # e.g. a full disk, or a folder another process holds: leave things as they were
        if backup is not None:
            _put_back(backup, path)
        elif created:
            _remove_created(created)
        raise
    run = RunDir(path)
    run.replacing = backup is not None
    try:
        if mode != "resume":
            _write_provenance(run, command, config, seed, argv, device)
        yield run
    except BaseException as exc:
        if backup is not None:
            _put_back(backup, path)
        else:
            _end_failed(run, lock, exc, created, earlier)
        raise
    _record_status(run, "finished")
    if backup is not None:
        _discard(backup)
    lock.unlink(missing_ok=True)


def _end_failed(
    run: RunDir, lock: Path, exc: BaseException, created: list[Path], earlier: frozenset[str] | None
) -> None:
    """After the body of `open_run` raised (no earlier run set aside): record how the command ended, or remove a
    new run that `_discarded` (with only what it created: the folders in `created`, or in a folder that existed
    empty the entries not in `earlier`). A resumed run (`earlier` is None) is never removed."""
    status = _stop_status(exc)
    remove = earlier is not None and (_only_bookkeeping(run.path) or _discarded(run, exc))
    if status is not None and not remove:
        _record_status(run, status)
    lock.unlink(missing_ok=True)
    if not remove:
        if earlier is not None and run.resume_hint and isinstance(exc, (OSError, MemoryError)):
            exc.add_note(f"the run so far is kept in {run.path}: {run.resume_hint}")
        return
    if created:
        _remove_created(created)
        return
    for name in set(os.listdir(run.path)) - earlier:  # type: ignore[operator]
        target = run.path / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                target.unlink()


def _discarded(run: RunDir, exc: BaseException) -> bool:
    """Whether a new run that raised `exc` is removed: one the machine stopped (an OSError such as a full disk or
    a read-only folder, or out of memory) holds half-written files and no result, unless it saved a point that
    a later command continues from (`RunDir.resume_hint`). Other failures keep the folder their message may
    point to (an interrupt's checkpoint, a divergence's last finite state, a bug's partial files)."""
    return isinstance(exc, (OSError, MemoryError)) and not run.resume_hint


RUN_STATUSES = ("finished", "interrupted", "failed")


def _stop_status(exc: BaseException) -> str | None:
    """ "interrupted" for Ctrl-C / SIGTERM (exit code 130), None for refused input (an `InputError`: the run did
    no work, and a refused `--resume` must leave its folder as it was), "failed" for anything else."""
    if isinstance(exc, KeyboardInterrupt) or getattr(exc, "exit_code", None) == 130:
        return "interrupted"
    return None if isinstance(exc, InputError) else "failed"


def _record_status(run: RunDir, status: str) -> None:
    """Note in manifest.json how the command ended (`run_status` reads it); a failed write changes nothing else."""
    manifest = run.path / "manifest.json"
    try:
        old = read_json(manifest, "run manifest") if manifest.is_file() else None
        if isinstance(old, dict) and old.get("status") != status:  # unchanged: no file is rewritten
            write_json(manifest, {**old, "status": status})
    except (OSError, ValueError):
        pass  # a full disk, or a corrupt manifest: the run's own error (if any) is the one the user sees


def run_status(path: str | Path) -> str:
    """How a run folder's command ended: "running" (its lock's process is alive), "interrupted" (killed: a lock
    with a dead pid, or Ctrl-C / SIGTERM), "failed", "finished"; for runs written before the status was
    recorded, "finished" when it has a report.html, else "unknown"."""
    path = Path(path)
    lock = path / LOCK_NAME
    if lock.is_file():
        try:
            pid = int(lock.read_text().strip() or 0)
        except (OSError, ValueError):
            pid = 0
        return "running" if pid and pid != os.getpid() and _alive(pid) else "interrupted"
    try:
        manifest = read_json(path / "manifest.json", "run manifest")
        status = manifest.get("status") if isinstance(manifest, dict) else None
    except (OSError, ValueError):
        status = None
    if status in RUN_STATUSES:
        return str(status)
    return "finished" if (path / "report.html").is_file() else "unknown"


def _missing_folders(path: Path) -> list[Path]:
    """`path` and those of its parents that do not exist yet, deepest first (what `_make_folder` will create)."""
    missing = []
    for p in [path, *path.parents]:
        if p.exists():
            break
        missing.append(p)
    return missing


def _remove_created(created: list[Path]) -> None:
    """Remove the run folder this call created and then each parent it created that is left empty."""
    shutil.rmtree(created[0], ignore_errors=True)
    for parent in created[1:]:
        try:
            parent.rmdir()
        except OSError:
            return


def _only_bookkeeping(path: Path) -> bool:
    names = {p.name for p in path.iterdir()}
    if (path / "figures").is_dir() and any((path / "figures").iterdir()):
        return False
    return names <= _BOOKKEEPING | {"config.json", "manifest.json"}


def frame(rows: list[dict]) -> Callable[[], Any]:
    """A table of `rows` for `RunResult.tables`, built as a pandas DataFrame when first read (importing pandas
    costs ≈ 0.25 s, which a CLI call that never reads the table should not pay)."""

    def build() -> Any:
        import pandas as pd

        return pd.DataFrame(rows)

    return build


class Tables(Mapping):
    """name -> DataFrame; a value given as a zero-argument callable is called on first access and kept."""

    def __init__(self, tables: Mapping[str, Any] | None = None) -> None:
        self._items = dict(tables or {})

    def __getitem__(self, name: str) -> Any:
        value = self._items[name]
        if callable(value):
            value = self._items[name] = value()
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Tables({', '.join(self._items)})"


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What every study's `run(config, out)` returns: the folder, the config, a summary and named tables.

    `tables` maps a name to a pandas DataFrame (e.g. `result.tables["heads"]`, built on first access); `summary`
    holds the final scalar metrics a report leads with.
    """

    path: Path
    config: Any
    summary: dict = dataclasses.field(default_factory=dict)
    tables: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.tables, Tables):
            object.__setattr__(self, "tables", Tables(self.tables))

    def __str__(self) -> str:
        return str(self.path)
