"""Bad inputs of `attnlab paths` (issue 8): each is refused with one line naming the option, before any work,
and leaves every earlier file as it was; the valid `--chains 1 --draws 5` runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnlab.cli import main

SMALL = ["--P", "20", "--n-test", "40"]


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def _refused(argv: list[str], tmp_path: Path, capsys) -> str:
    """Run argv with an earlier file in tmp_path; assert exit 1, one stderr line, nothing changed; return it."""
    (tmp_path / "earlier.txt").write_text("keep me\n")
    before = _snapshot(tmp_path)
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and err[0].startswith("attnlab: error: "), err
    assert _snapshot(tmp_path) == before
    assert not (tmp_path / "r").exists()
    return err[0]


def test_solve_huge_P_is_refused_before_the_task_is_built(tmp_path, capsys):
    msg = _refused(["paths", "solve", "--P", "100000000", "--out", str(tmp_path / "r")], tmp_path, capsys)
    assert "estimated memory" in msg and "P=100000000" in msg and "exceeds the budget" in msg


def test_solve_huge_n_test_is_refused(tmp_path, capsys):
    msg = _refused(["paths", "solve", "--n-test", "100000000", "--out", str(tmp_path / "r")], tmp_path, capsys)
    assert "task arrays" in msg and "n_test=100000000" in msg


@pytest.mark.parametrize("N", ["1e-300", "0.5", "nan"])
def test_solve_tiny_width_is_refused(N, tmp_path, capsys):
    msg = _refused(["paths", "solve", "--N", N, "--out", str(tmp_path / "r")], tmp_path, capsys)
    assert f"--N: widths must be >= 1 (or inf for the GP limit), got {float(N)}" in msg


@pytest.mark.parametrize("option", ["--thin", "--leapfrog", "--predict-every"])
def test_sample_zero_counts_are_refused(option, tmp_path, capsys):
    msg = _refused(["paths", "sample", option, "0", "--out", str(tmp_path / "r")], tmp_path, capsys)
    assert f"{option} must be an integer >= 1, got 0" in msg


def test_threads_negative_is_refused(tmp_path, capsys):
    msg = _refused(["paths", "solve", "--threads", "-1", "--out", str(tmp_path / "r")], tmp_path, capsys)
    assert "--threads must be >= 1" in msg


def test_sample_one_chain_five_draws_runs(tmp_path, capsys):
    out = tmp_path / "s"
    rc = main(
        [
            "paths",
            "sample",
            *SMALL,
            "--N",
            "4",
            "--chains",
            "1",
            "--draws",
            "5",
            "--warmup",
            "10",
            "--temperature",
            "0.1",
            "--out",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert rc == 0 and f"run folder: {out}" in text
    m = json.loads((out / "metrics.json").read_text())
    assert m["chains"] == 1 and m["draws"] == 5
    # 5 draws split into halves of 2: R-hat is defined, bulk ESS (needs 4 per half) is not: reported as n/a
    assert m["rhat_max"] is not None and m["ess_bulk_min"] is None and m["converged"] is False
    assert "bulk ESS n/a" in text
    assert "n/a" in (out / "report.html").read_text()


def _sweep(out: Path, *extra: str) -> int:
    return main(["paths", "sweep", *SMALL, "--Ns", "30", "10", "--temperature", "0.05", "--out", str(out), *extra])


def _rows(path: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k != "wall_s"} for line in path.read_text().splitlines()]


def test_sweep_into_existing_run_is_refused_then_resumed(tmp_path, capsys):
    out = tmp_path / "sw"
    assert _sweep(out) == 0
    full = _rows(out / "metrics.jsonl")
    assert [r["N"] for r in full] == [30.0, 10.0] and all(r["converged"] for r in full)
    before = _snapshot(tmp_path)
    capsys.readouterr()
    assert _sweep(out) == 1  # a second sweep into the folder: refused, nothing appended
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not empty; pass --overwrite" in err[0]
    assert _snapshot(tmp_path) == before
    assert _sweep(out, "--resume", "--temperature", "0.02") == 1  # conflicting flag on resume
    assert "--resume: temperature differs from the saved config.json" in capsys.readouterr().err
    assert _snapshot(tmp_path) == before
    # an interrupted sweep: the first line complete, the second cut by a kill
    lines = (out / "metrics.jsonl").read_text().splitlines()
    (out / "metrics.jsonl").write_text(lines[0] + "\n" + lines[1][:40])
    assert _sweep(out, "--resume") == 0
    assert _rows(out / "metrics.jsonl") == full and _rows(out / "points.jsonl") == full
    assert _sweep(out, "--overwrite") == 0
    assert _rows(out / "metrics.jsonl") == full
