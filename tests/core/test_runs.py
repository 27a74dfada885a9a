"""The run layer: folders are never lost or mixed, files are written atomically, bad files get one line."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from attnlab.errors import InputError, NumericalError, check, check_choice, check_finite, check_int
from attnlab.runs import LOCK_NAME, RunDir, config_hash, open_run, read_json, read_jsonl, write_json
from attnlab.runs.configs import config_from_dict


@dataclasses.dataclass(frozen=True)
class _Cfg:
    n: int = 3
    name: str = "x"
    sizes: tuple[int, ...] = (1, 2)
    lr: float = 0.1


def _snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_new_run_writes_config_and_manifest(tmp_path):
    with open_run(tmp_path / "r", "bb train", _Cfg(), seed=5, argv=["bb", "train"]) as run:
        assert (run.path / LOCK_NAME).read_text() == str(os.getpid())
        run.append_metrics({"step": 1, "loss": 2.5})
    assert not (tmp_path / "r" / LOCK_NAME).exists()
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["command"] == "bb train" and manifest["seed"] == 5
    assert manifest["config_hash"] == config_hash(_Cfg())
    assert config_from_dict(_Cfg, RunDir(tmp_path / "r").read_config()) == _Cfg()


def test_non_empty_folder_is_refused_and_untouched(tmp_path):
    with open_run(tmp_path / "r", "bb train", _Cfg()) as run:
        run.append_metrics({"step": 1})
    before = _snapshot(tmp_path / "r")
    with pytest.raises(InputError, match="not empty; pass --overwrite"):
        with open_run(tmp_path / "r", "consensus simulate", _Cfg(n=9)):
            pass
    assert _snapshot(tmp_path / "r") == before


def test_overwrite_replaces_a_run_but_never_a_foreign_folder(tmp_path):
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "a.jpg").write_bytes(b"x")
    with pytest.raises(InputError, match="not an attnlab run folder"):
        with open_run(foreign, "scan", _Cfg(), mode="overwrite"):
            pass
    assert (foreign / "a.jpg").read_bytes() == b"x"
    with open_run(tmp_path / "r", "scan", _Cfg()) as run:
        run.write_json("old.json", {"a": 1})
    with open_run(tmp_path / "r", "scan", _Cfg(n=4), mode="overwrite") as run:
        pass
    assert not (tmp_path / "r" / "old.json").exists()
    assert RunDir(tmp_path / "r").read_config()["n"] == 4


def test_failed_overwrite_puts_the_earlier_run_back(tmp_path):
    with open_run(tmp_path / "r", "scan", _Cfg()) as run:
        run.write_json("result.json", {"a": 1})
    before = _snapshot(tmp_path / "r")
    with pytest.raises(NumericalError):
        with open_run(tmp_path / "r", "scan", _Cfg(n=7), mode="overwrite") as run:
            run.write_json("result.json", {"a": "partial"})
            raise NumericalError("diverged at step 3")
    assert _snapshot(tmp_path / "r") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_resume_needs_a_run_of_the_same_command(tmp_path):
    with pytest.raises(InputError, match="holds none"):
        with open_run(tmp_path / "nothing", "bb train", _Cfg(), mode="resume"):
            pass
    with open_run(tmp_path / "r", "bb train", _Cfg()) as run:
        run.append_metrics({"step": 1})
    with pytest.raises(InputError, match="not `attnlab paths solve`"):
        with open_run(tmp_path / "r", "paths solve", _Cfg(), mode="resume"):
            pass
    with open_run(tmp_path / "r", "bb train", _Cfg(), mode="resume") as run:
        assert run.metrics() == [{"step": 1}]


def test_lock_keeps_a_second_process_out_and_a_stale_lock_is_taken_over(tmp_path):
    with open_run(tmp_path / "r", "bb train", _Cfg()) as run:
        with pytest.raises(InputError):  # same folder, still held: refused before anything is written
            with open_run(tmp_path / "r", "bb train", _Cfg(), mode="resume"):
                pass
        run.write_json("x.json", 1)
    (tmp_path / "r" / LOCK_NAME).write_text("999999999")  # a dead owner
    with open_run(tmp_path / "r", "bb train", _Cfg(), mode="resume") as run:
        assert (run.path / LOCK_NAME).read_text() == str(os.getpid())


def test_live_lock_of_another_process_is_refused(tmp_path):
    with open_run(tmp_path / "r", "scan", _Cfg()) as run:
        run.write_json("x.json", 1)
    (tmp_path / "r" / LOCK_NAME).write_text(str(os.getppid()))
    with pytest.raises(InputError, match=f"in use by another attnlab process \\(pid {os.getppid()}\\)"):
        with open_run(tmp_path / "r", "scan", _Cfg(), mode="resume"):
            pass


def test_failed_command_leaves_no_folder(tmp_path):
    with pytest.raises(InputError):
        with open_run(tmp_path / "r", "scan", _Cfg()):
            raise InputError("bad model")
    assert not (tmp_path / "r").exists()
    with pytest.raises(KeyboardInterrupt):  # a run that wrote results keeps them
        with open_run(tmp_path / "k", "scan", _Cfg()) as run:
            run.write_json("partial.json", {"a": 1})
            raise KeyboardInterrupt
    assert (tmp_path / "k" / "partial.json").exists() and not (tmp_path / "k" / LOCK_NAME).exists()


def test_out_that_is_a_file_or_read_only(tmp_path):
    (tmp_path / "f").write_text("keep")
    with pytest.raises(InputError, match="is a file"):
        with open_run(tmp_path / "f", "scan", _Cfg()):
            pass
    assert (tmp_path / "f").read_text() == "keep"
    if os.geteuid() == 0:  # root may write anywhere: check the refusal from a child that drops to nobody
        seen = _refusal_as_nobody()
        if seen == "cannot drop privileges":
            pytest.skip("root without CAP_SETUID: no user to check the refusal as")
        assert seen == "not writable"
        return
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(InputError, match="not writable"):
            with open_run(ro / "r", "scan", _Cfg()):
                pass
    finally:
        ro.chmod(0o700)


def _refusal_as_nobody() -> str:
    """Fork, become uid/gid 65534 in the child, and try `open_run` under a root-owned read-only folder (in a
    world-readable temp folder, since pytest's own tmp folders are root-only). Returns what the child saw."""
    base = Path(tempfile.mkdtemp(prefix="attnlab-ro-"))
    base.chmod(0o755)
    (base / "ro").mkdir(mode=0o555)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        seen = "no refusal"
        try:
            try:
                os.setgid(65534)
                os.setuid(65534)
            except PermissionError:
                os.write(write_end, b"cannot drop privileges")
                os._exit(0)
            with open_run(base / "ro" / "r", "scan", _Cfg()):
                pass
        except InputError as exc:
            seen = "not writable" if "is not writable" in str(exc) else str(exc)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the test
            seen = repr(exc)
        os.write(write_end, seen.encode()[:4000])
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        seen = pipe.read()
    os.waitpid(pid, 0)
    shutil.rmtree(base)
    return seen


def test_out_where_nothing_can_be_written(tmp_path):
    for bad in (Path("/proc/attnlab-run"), Path("/dev/null/run")):
        with pytest.raises(InputError, match=f"--out {bad}"):
            with open_run(bad, "scan", _Cfg()):
                pass


def test_read_jsonl_drops_only_a_cut_last_line(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"step": 1}\n{"step": 2}\n{"ste')
    assert read_jsonl(p) == [{"step": 1}, {"step": 2}]
    p.write_text('{"step": 1}\n{"st\n{"step": 3}\n')
    with pytest.raises(InputError, match="line 2 is corrupt"):
        read_jsonl(p)


def test_read_json_names_a_corrupt_or_missing_file(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"n": 1')
    with pytest.raises(InputError, match="config.json is corrupt"):
        read_json(p, "run config")
    with pytest.raises(InputError, match="not found"):
        read_json(tmp_path / "none.json")


def test_atomic_write_leaves_no_temporary_file(tmp_path):
    write_json(tmp_path / "a.json", {"x": float("nan"), "y": float("inf")})
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": None, "y": "inf"}


def test_config_from_dict_rebuilds_tuples_and_rejects_unknown_fields():
    cfg = config_from_dict(_Cfg, {"n": 4, "sizes": [3, 4], "lr": "inf"})
    assert cfg == _Cfg(n=4, sizes=(3, 4), lr=float("inf"))
    with pytest.raises(InputError, match="unknown field\\(s\\) bogus"):
        config_from_dict(_Cfg, {"bogus": 1})
    with pytest.raises(InputError, match="expected a JSON object"):
        config_from_dict(_Cfg, [1, 2])


def test_checks_give_one_line_errors():
    check(True, "fine")
    with pytest.raises(NumericalError) as info:
        check(False, "loss is NaN at step 7", NumericalError)
    assert info.value.exit_code == 2
    assert check_choice("adam", ["adam", "sgd"], "optimizer") == "adam"
    with pytest.raises(InputError, match="did you mean 'adam'"):
        check_choice("adma", ["adam", "sgd"], "optimizer")
    assert check_int(3.0, 1, "--n") == 3
    for bad in (0, 2.5, True, "3"):
        with pytest.raises(InputError, match="--n must be an integer >= 1"):
            check_int(bad, 1, "--n")
    assert check_finite(1e-3, "--lr", positive=True) == 1e-3
    for bad in (float("nan"), float("inf"), 0.0, "x"):
        with pytest.raises(InputError, match="--lr must be a"):
            check_finite(bad, "--lr", positive=True)


def test_run_result_tables_are_built_on_first_read_and_kept():
    import pandas as pd

    from attnlab.runs import RunResult, frame

    calls = []

    def build():
        calls.append(1)
        return pd.DataFrame([{"a": 1}])

    result = RunResult(Path("."), None, {}, {"t": build, "f": frame([{"x": 2.5}, {"x": 3.5}])})
    assert calls == [] and list(result.tables) == ["t", "f"] and len(result.tables) == 2
    assert result.tables["t"]["a"].tolist() == [1] and result.tables["t"] is result.tables["t"] and calls == [1]
    assert result.tables["f"]["x"].sum() == 6.0


def _full_disk_lock(monkeypatch) -> None:
    """The lock file's pid cannot be written (ENOSPC), as on a full disk."""
    import errno

    import attnlab.runs.io as runs

    class Full:
        def __init__(self, fd: int, mode: str) -> None:
            os.close(fd)

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            return None

        def write(self, text: str) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runs.os, "fdopen", Full)


def test_a_full_disk_at_the_lock_leaves_no_folder_and_no_lock(tmp_path, monkeypatch):
    from attnlab.runs import WriteError

    _full_disk_lock(monkeypatch)
    with pytest.raises(WriteError, match="No space left"):
        with open_run(tmp_path / "a" / "r", "bb train", _Cfg()):
            pass
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_at_the_lock_keeps_the_run_being_overwritten(tmp_path, monkeypatch):
    from attnlab.runs import WriteError

    with open_run(tmp_path / "r", "bb train", _Cfg()) as run:
        run.write_json("result.json", {"x": 1})
    before = sorted(p.name for p in (tmp_path / "r").iterdir())
    _full_disk_lock(monkeypatch)
    with pytest.raises(WriteError):
        with open_run(tmp_path / "r", "bb train", _Cfg(), mode="overwrite"):
            pass
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == before
    assert read_json(tmp_path / "r" / "result.json") == {"x": 1} and [p.name for p in tmp_path.iterdir()] == ["r"]
