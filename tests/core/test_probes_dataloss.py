"""Issue 17, data loss and run folders: no command loses an earlier run, leaves a new empty folder, rewrites a
finished run or says something untrue about where a run is (probes measured on main, then fixed)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from attnlab import demo
from attnlab.cli import main
from attnlab.runs import LOCK_NAME, open_run, write_json
from attnlab.toy.task import BBTask
from tests.probes import refused, snapshot

BB_TINY = ["--d-model", "32", "--d-mlp", "64", "--seq-len", "16", "--batch", "8", "--eval-batch", "16"]
BB = ["bb", "train", "--steps", "4", "--ckpt-every", "2", *BB_TINY, "--threads", "1"]
SERIES = ["series", "train", "--steps", "4", "--layers", "1", "--heads", "2", "--d-model", "16", "--d-mlp", "32",
          "--seq-len", "12", "--batch", "4", "--save-every", "2", "--vocab-chars", "12", "--threads", "1"]  # fmt: skip


def _interrupt_update(monkeypatch: pytest.MonkeyPatch, task: type, at: int) -> None:
    """Ctrl-C while update `at` draws its batch (`BBTask.train_batch`, which bb and series train on)."""
    real = task.train_batch

    def flaky(self, batch, seq_len, seed, step):
        if step == at:
            raise KeyboardInterrupt
        return real(self, batch, seq_len, seed, step)

    monkeypatch.setattr(task, "train_batch", flaky)


def _dead_pid() -> int:
    """The pid of a process that has exited (the owner of a leftover folder)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _earlier_run(root: Path, name: str = "D") -> Path:
    """An earlier attnlab run with a few result files."""
    with open_run(root / name, "bb sample", {"n": 1}, argv=["bb", "sample"]) as run:
        for i in range(3):
            run.write_json(f"result_{i}.json", {"i": i})
    return root / name


def _orphan_beside_another_run(root: Path) -> None:
    """A run set aside by a killed --overwrite, whose name another complete run has since taken."""
    earlier, other = _earlier_run(root, "R0"), _earlier_run(root, "R1")
    earlier.rename(root / f".R.replaced-{_dead_pid()}")
    other.rename(root / "R")


@pytest.fixture(scope="module")
def bb_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bb") / "run"
    assert main([*BB, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def series_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("series") / "run"
    assert main([*SERIES, "--out", str(out)]) == 0
    return out


# --- refusals: one line, nothing changed, no folder left ------------------------------------------------------
PROBES: list[tuple[list[str], Callable[[Path], object] | None, list[str]]] = [
    # the demo validated --seed only after deleting the earlier demo (20 of 21 files lost)
    (["demo", "--only", "paths", "--seed", "-1", "--overwrite", "--out", "{root}/D"], _earlier_run, ["--seed", "-1"]),
    (["demo", "--seed", str(2**40), "--overwrite", "--out", "{root}/D"], _earlier_run, ["--seed"]),
    (["demo", "--only", "bogus", "--overwrite", "--out", "{root}/D"], _earlier_run, ["--only bogus"]),
    (["demo", "--only", "paths", "--seed", "-1", "--out", "{root}/new/D"], None, ["--seed"]),
    # a killed --overwrite's backup is never silently lost: the command says where it is and how to restore it
    ([*BB, "--overwrite", "--out", "{root}/R"], _orphan_beside_another_run, [".R.replaced-", "mv ", "restore"]),
    (["demo", "--overwrite", "--out", "{root}"], _orphan_beside_another_run, [".R.replaced-", "mv "]),
]


@pytest.mark.parametrize("argv, setup, names", PROBES, ids=[" ".join(p[0][:4]) for p in PROBES])
def test_refusal_changes_nothing(tmp_path, capsys, argv, setup, names):
    if setup is not None:
        setup(tmp_path)
    message = refused(argv, tmp_path, capsys)
    assert all(n in message for n in names), message


def test_a_command_that_fails_inside_its_run_leaves_no_new_folder(tmp_path, capsys, monkeypatch):
    # the run layer created --out's missing parents too, and removed only --out itself on failure
    import attnlab.bb.run

    def fail(*args, **kwargs):
        raise attnlab.errors.InputError("late failure after the folder was opened")

    monkeypatch.setattr(attnlab.bb.run, "build_model", fail)
    message = refused([*BB, "--out", "{root}/a/b/run"], tmp_path, capsys)
    assert "late failure" in message and not (tmp_path / "a").exists()


# --- the demo replaces the earlier demo only once the new one has finished ------------------------------------
def _fake_study(tmp_path: Path, fail: BaseException | None) -> types.ModuleType:
    """A study demo that writes one run and then optionally fails."""
    from attnlab.reports.page import Report

    def run_demo(out: Path, seed: int) -> Report:
        with open_run(out / "sweep", "paths sweep", {"seed": seed}) as run:
            run.write_json("metrics.json", {"seed": seed})
        if fail is not None:
            raise fail
        rep = Report("fake")
        rep.paragraph("fake study")
        return rep

    return types.SimpleNamespace(run_demo=run_demo)  # type: ignore[return-value]


@pytest.mark.parametrize("fail, code", [(KeyboardInterrupt(), 130), (None, 0)])
def test_demo_overwrite_keeps_the_earlier_run_until_the_new_demo_finished(tmp_path, capsys, monkeypatch, fail, code):
    monkeypatch.setitem(sys.modules, "fake_demo_study", _fake_study(tmp_path, fail))
    monkeypatch.setitem(demo.DEMOS, "paths", "fake_demo_study")
    earlier = _earlier_run(tmp_path)
    before = snapshot(earlier)
    capsys.readouterr()
    assert main(["demo", "--only", "paths", "--overwrite", "--out", str(earlier)]) == code
    err = capsys.readouterr().err
    if fail is not None:
        assert snapshot(earlier) == before, "the earlier run changed"
        assert "earlier run in" in err and "back in place" in err and len(err.strip().splitlines()) == 1
    else:
        assert (earlier / "paths" / "sweep" / "metrics.json").is_file() and not (earlier / "result_0.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["D"], "a set-aside or temporary folder was left"


# --- a run set aside by a killed --overwrite is put back by the next command ----------------------------------
def _killed_overwrite(run: Path) -> int:
    """The folder state `kill -9` leaves mid `--overwrite`: the earlier run set aside under the dead pid, and the
    unfinished new run (locked by that pid) in its place."""
    pid = _dead_pid()
    run.rename(run.with_name(f".{run.name}.replaced-{pid}"))
    run.mkdir()
    (run / LOCK_NAME).write_text(str(pid))
    write_json(run / "manifest.json", {"command": "bb train"})
    (run / "checkpoints").mkdir()
    return pid


def test_a_killed_overwrite_is_put_back_by_the_next_command(bb_run, tmp_path, capsys):
    run = tmp_path / "R"
    shutil.copytree(bb_run, run)
    before = snapshot(run)
    _killed_overwrite(run)
    capsys.readouterr()
    assert main(["bb", "train", "--resume", "--steps", "4", "--threads", "1", "--out", str(run)]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert snapshot(run) == before and sorted(p.name for p in tmp_path.iterdir()) == ["R"]


def test_a_killed_overwrite_inside_a_folder_is_put_back_when_that_folder_is_used(tmp_path, capsys):
    parent = tmp_path / "P"
    parent.mkdir()
    earlier = _earlier_run(parent, "R")
    before = snapshot(earlier)
    _killed_overwrite(earlier)
    shutil.rmtree(earlier)  # the kill came before the new run's folder was made
    capsys.readouterr()
    assert main(["demo", "--only", "paths", "--out", str(parent)]) == 1  # P is not empty: refused, but R is back
    assert "is not empty" in capsys.readouterr().err
    assert snapshot(earlier) == before and sorted(p.name for p in parent.iterdir()) == ["R"]


# --- interrupted --overwrite: the message says what is where --------------------------------------------------
def test_an_interrupted_overwrite_says_the_earlier_run_is_back(bb_run, tmp_path, capsys, monkeypatch):
    run = tmp_path / "R"
    shutil.copytree(bb_run, run)
    before = snapshot(run)
    _interrupt_update(monkeypatch, BBTask, 1)
    capsys.readouterr()
    assert main([*BB, "--overwrite", "--out", str(run)]) == 130
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("attnlab: error:")]
    assert len(err) == 1 and "--resume" not in err[0] and f"earlier run is back in {run}" in err[0], err
    assert snapshot(run) == before and sorted(p.name for p in tmp_path.iterdir()) == ["R"]


# --- --resume with nothing to do changes nothing --------------------------------------------------------------
@pytest.mark.parametrize("which", ["bb", "series"])
def test_resume_with_nothing_to_do_changes_no_file(bb_run, series_run, capsys, which):
    run = bb_run if which == "bb" else series_run
    before = snapshot(run)
    capsys.readouterr()
    assert main([which, "train", "--resume", "--steps", "4", "--threads", "1", "--out", str(run)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("nothing to do:") and "step 4" in out[0], out
    assert snapshot(run) == before


def test_paths_sweep_resume_with_nothing_to_do_changes_no_file(tmp_path, capsys):
    sweep = ["paths", "sweep", "--P", "20", "--n-test", "20", "--Ns", "10", "30", "--out", str(tmp_path / "s")]
    assert main(sweep) == 0
    before = snapshot(tmp_path / "s")
    capsys.readouterr()
    assert main([*sweep, "--resume"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("nothing to do:"), out
    assert snapshot(tmp_path / "s") == before


# --- an interrupted series holds the checkpoints an uninterrupted one would -----------------------------------
def test_an_interrupted_series_keeps_its_checkpoint_outside_the_series(series_run, tmp_path, capsys, monkeypatch):
    run = tmp_path / "cut"
    with monkeypatch.context() as m:
        _interrupt_update(m, BBTask, 3)
        capsys.readouterr()
        assert main([*SERIES, "--out", str(run)]) == 130
    err = capsys.readouterr().err
    assert f"checkpoint saved in {run / 'interrupted'}" in err and "--resume" in err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_0", "step_2"]
    assert main(["series", "train", "--resume", "--steps", "4", "--threads", "1", "--out", str(run)]) == 0
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_0", "step_2", "step_4"]
    assert not (run / "interrupted").exists()
    assert (run / "metrics.jsonl").read_text() == (series_run / "metrics.jsonl").read_text()
