"""`attnlab reproduce --resume` after `kill -9` and `--workers 2` give the table an uninterrupted, sequential run
gives (issue 18); `--docs` is a config field, so the Python API writes the docs table too (issue 20)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnlab.cli import main

ROOT = Path(__file__).resolve().parents[2]
# the consensus rows of nine sub-second to one-second tiny experiments (the table's machinery, not its cost)
SOME = ["--targets", "R1a,R1b,R2b,R2c,R3,R4c,R5a,R5b,R6a,R12"]


def _rows(folder: Path) -> list[dict]:
    """The table's rows without the links (which name run folders) and the wall times."""
    rows = json.loads((folder / "reproduction.json").read_text())["rows"]
    return [{k: v for k, v in r.items() if k not in ("runs", "figure")} for r in rows]


@pytest.fixture(scope="module")
def sequential(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("seq") / "r"
    assert main(["reproduce", "consensus", "--profile", "tiny", *SOME, "--out", str(out), "--threads", "1"]) == 0
    return out


def _start(out: Path, *more: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "attnlab", "reproduce", "consensus", "--profile", "tiny", *SOME, "--out", str(out),
           *more]  # fmt: skip
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_for_marks(proc: subprocess.Popen, marks: Path, n: int) -> list[Path]:
    """Block until `n` experiments have ended (their marks written) or the process has exited."""
    while proc.poll() is None:
        done = sorted(marks.glob("*.json")) if marks.is_dir() else []
        if len(done) >= n:
            return done
        time.sleep(0.05)
    return []


@pytest.mark.slow
def test_sigterm_then_kill_9_then_resume_gives_the_same_table(sequential, tmp_path) -> None:
    out = tmp_path / "killed"
    proc = _start(out)
    assert _wait_for_marks(proc, out / "experiments", 2), "reproduce ended before it could be stopped"
    proc.send_signal(signal.SIGTERM)
    proc.wait()
    stopped = json.loads((out / "sessions.json").read_text())[0]
    assert stopped["interrupted"] and stopped["ended"] and stopped["wall_seconds"] > 0  # SIGTERM: its end is known
    proc = _start(out, "--resume")
    done = _wait_for_marks(proc, out / "experiments", 4)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert done, "reproduce ended before it could be killed"
    assert not (out / "reproduction.json").exists()  # killed mid-run: there is something to resume
    kept = {p.name: p.read_text() for p in done}
    argv = ["reproduce", "consensus", "--profile", "tiny", *SOME, "--out", str(out), "--resume", "--threads", "1"]
    assert main(argv) == 0
    assert _rows(out) == _rows(sequential)
    assert {p.name: p.read_text() for p in done} == kept  # the finished experiments were not run again
    table = [(f / "reproduction.md").read_text().split("\n", 3)[3] for f in (out, sequential)]
    assert table[0] == table[1]  # the same table below the run note (whose seconds differ)
    record = json.loads((out / "reproduction.json").read_text())
    first, killed, resumed = record["sessions"]  # the header's wall time counts the sessions with an end
    assert killed["ended"] is None and resumed["wall_seconds"] > 0
    assert record["wall_seconds"] == pytest.approx(first["wall_seconds"] + resumed["wall_seconds"], abs=0.11)
    note = "over 3 session(s) (1 stopped and resumed; 1 killed with no recorded end, not counted)"
    assert note in (out / "reproduction.md").read_text()


def test_resume_refuses_other_settings_and_a_missing_run(sequential, tmp_path, capsys) -> None:
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(sequential, out)
    assert main(["reproduce", "consensus", "--profile", "quick", *SOME, "--out", str(out), "--resume"]) == 1
    err = capsys.readouterr().err
    assert "--resume: profile differ from the saved run's" in err
    assert main(["reproduce", "consensus", "--profile", "tiny", "--out", str(tmp_path / "none"), "--resume"]) == 1


@pytest.mark.slow
def test_two_workers_give_the_sequential_table(sequential, tmp_path) -> None:
    out = tmp_path / "ray"
    argv = ["reproduce", "consensus", "--profile", "tiny", *SOME, "--out", str(out), "--workers", "2", "--threads", "1"]
    assert main(argv) == 0
    assert _rows(out) == _rows(sequential)


def test_docs_folder_is_written_by_the_python_api(sequential, tmp_path) -> None:
    """`ReproduceConfig(docs=...)`: the run function exports the table and the rows' figures (no CLI needed)."""
    from attnlab.reproduce import ReproduceConfig, reproduce
    from attnlab.reproduce.report import SECTION_MARKS

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "consensus.md").write_text("# Consensus\n\nhand text\n")
    config = ReproduceConfig(studies=("consensus",), profile="tiny", targets=("R5a", "R12"), docs=str(docs))
    result = reproduce(config, tmp_path / "r")
    md = (docs / "reproduction.md").read_text()
    assert "| R5a |" in md and "| R12 |" in md and "| R3 |" not in md
    assert (docs / "figures" / "consensus" / "cons_counter-R12.png").is_file()
    assert sum(g["met"] for g in result.summary["consensus"].values()) >= 1
    doc = (docs / "consensus.md").read_text()  # the study doc gets its rows, generated, after the hand text
    assert doc.startswith("# Consensus\n\nhand text\n") and doc.count(SECTION_MARKS[0]) == 1
    rows = json.loads((docs / "reproduction.json").read_text())["rows"]
    assert all(f"| {r['id']} | {r['group']} | {r['claim']} |" in doc and f"**{r['verdict']}**" in doc for r in rows)
    reproduce(config, tmp_path / "r2")  # a second export replaces the section, keeping the hand text
    assert (docs / "consensus.md").read_text().count(SECTION_MARKS[0]) == 1


def test_table_only_reads_the_ended_experiments_and_writes_nothing_in_the_run(sequential, tmp_path, capsys) -> None:
    """`--table-only`: the rows of ended experiments are the finished table's; a row whose experiment has not
    ended reads "not run yet"; the run folder is left as it was; a folder of another command is refused."""
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(sequential, out)
    (out / "reproduction.json").unlink()  # as a run that has not finished
    (out / "experiments" / "cons_counter.json").unlink()  # R12's experiment has not ended yet
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    docs = tmp_path / "docs"
    assert main(["reproduce", "--table-only", "--out", str(out), "--docs", str(docs)]) == 0
    assert "not ended yet: cons_counter" in capsys.readouterr().out
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before  # nothing written in the run
    partial = {r["id"]: r for r in json.loads((docs / "reproduction.json").read_text())["rows"]}
    full = {r["id"]: r for r in _rows(sequential)}
    assert partial["R12"]["verdict"] == "not run" and "has not finished cons_counter" in partial["R12"]["why"]
    same = [k for k in full if k != "R12" and partial[k]["verdict"] == full[k]["verdict"]]
    assert len(same) == len(full) - 1
    assert "**Partial: the run has not finished**" in (docs / "reproduction.md").read_text()
    assert main(["reproduce", "--table-only", "--out", str(out / "runs" / "cons_full" / "constant")]) == 1
    assert "not a `reproduce` run" in capsys.readouterr().err


def test_table_only_on_a_finished_run_gives_its_table_and_writes_nothing(sequential) -> None:
    """`--table-only` on a finished run: the saved table again (re-evaluated from the saved experiments), dated by the
    run's end, not marked partial, and the run folder untouched."""
    from attnlab.reproduce.report import _run_note
    from attnlab.reproduce.run import table_so_far

    before = {p: p.read_bytes() for p in sequential.rglob("*") if p.is_file()}
    record = table_so_far(sequential)
    saved = json.loads((sequential / "reproduction.json").read_text())
    assert not record["partial"] and record["pending"] == [] and record["finished"] == saved["finished"]
    assert record["rows"] == saved["rows"] and record["counts"] == saved["counts"]
    note = _run_note(record)
    assert note.startswith("Profile `tiny`") and "Finished" in note and "by `attnlab reproduce --table-only`" in note
    assert {p: p.read_bytes() for p in sequential.rglob("*") if p.is_file()} == before
