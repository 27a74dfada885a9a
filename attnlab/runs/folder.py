"""The life of a run folder: `open_run` (new / resume / overwrite), its lock, setting an earlier run aside and
putting it back (`recover_replaced`), `run_status`. The rules it enforces are in `attnlab.runs`' docstring."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.errors import InputError
from attnlab.runs.io import (
    _write_fd,
    default_run_dir,
    read_json,
    read_metrics,
    save_npy,
    to_jsonable,
    write_failed,
    write_json,
    write_jsonl,
    write_text,
)
from attnlab.runs.provenance import config_hash, device_info, environment_manifest

LOCK_NAME = ".attnlab.lock"
REPLACED = ".replaced-"  # `.<run>.replaced-<pid>`: an earlier run set aside by --overwrite until the new one ends
DISCARD = ".discard-"  # `.<run>.discard-<pid>`: a folder being deleted
MODES = ("new", "resume", "overwrite")
_BOOKKEEPING = frozenset({LOCK_NAME, "figures"})


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
