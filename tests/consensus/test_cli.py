"""The `consensus simulate|phase` commands write the files the issue names; bad input gives one line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from attnlab.consensus import cli
from attnlab.consensus.errors import ConsensusInputError


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="attnlab")
    cli.register(parser.add_subparsers())
    return parser.parse_args(argv)


def test_simulate_writes_reintegrable_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "sim"
    args = _parse(["consensus", "simulate", "--n", "6", "--d", "3", "--batch", "4", "--t-max", "2", "--h", "0.1",
                   "--schedule", "random", "--delta", "0.5", "--mask", "causal", "--out", str(out)])
    assert args.func(args) == 0
    assert f"run folder: {out}" in capsys.readouterr().out
    E, t, x0 = np.load(out / "E.npy"), np.load(out / "t.npy"), np.load(out / "x0.npy")
    assert E.shape == (4, 21) and t.shape == (21,) and x0.shape == (4, 6, 3)
    w = np.load(out / "weights.npz", allow_pickle=False)
    assert w["P"].shape == (4, 1, 3, 3) and "V" in set(w["identity"].tolist())
    for name in ("config.json", "manifest.json", "metrics.json", "timeseries.csv", "report.html",
                 "figures/E_vs_time.png", "figures/sphere_t0.png"):
        assert (out / name).exists(), name
    assert json.loads((out / "config.json").read_text())["schedule"] == "random"


def test_phase_command(tmp_path: Path) -> None:
    out = tmp_path / "phase"
    args = _parse(["consensus", "phase", "--n", "8", "--d", "4", "--starts", "8", "--num-betas", "3",
                   "--t-max", "3", "--out", str(out)])
    assert args.func(args) == 0
    assert np.load(out / "frac.npy").shape == (3, 31)
    assert (out / "figures" / "phase_diagram.png").exists()


@pytest.mark.parametrize("argv,message", [
    (["--schedule", "sine"], "unknown schedule 'sine'; valid: constant, periodic, cycle, random"),
    (["--d", "1"], "d (dimension) must be an integer >= 2, got 1"),
    (["--n", "1"], "n (tokens) must be an integer >= 2, got 1"),
])
def test_simulate_bad_input_one_line(tmp_path: Path, argv: list[str], message: str) -> None:
    args = _parse(["consensus", "simulate", "--out", str(tmp_path / "x"), *argv])
    with pytest.raises(ConsensusInputError) as exc:
        args.func(args)
    assert str(exc.value).startswith(message) and "\n" not in str(exc.value)


def test_phase_retirement_changes_nothing() -> None:
    """Retiring starts whose tokens sit in a small cap (hemisphere theorem) leaves the phase diagram unchanged."""
    from attnlab.consensus.sweeps import phase_diagram

    betas = np.array([0.5, 2.0, 6.0])
    a = phase_diagram(betas, n=8, d=4, starts=16, t_max=15.0, retire=False)
    b = phase_diagram(betas, n=8, d=4, starts=16, t_max=15.0, retire=True)
    assert np.abs(a.frac - b.frac).max() <= 1e-12
    assert a.frac[0, -1] == 1.0
