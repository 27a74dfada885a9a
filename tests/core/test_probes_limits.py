"""Issue 17, limits: every value has a finite range, and memory and time are estimated before any work.

Each probe is an argv that used to give a traceback, a silent answer or a hang; it must now be refused in one
line (`tests/probes.py`) that names the field, the bound or the estimate. The valid edges are still accepted.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from attnlab.errors import InputError, check_int
from attnlab.runs import budget
from tests.probes import refused

CPUS = max(1, os.cpu_count() or 1)
OUT = ["--out", "{root}/out"]

PROBES = [
    # tracebacks from inside libraries
    (["bb", "train", "--steps", "1e300"], ["steps must be an integer in [1, 1000000000000]", "1e+300"]),
    (["bb", "train", "--steps", "inf"], ["steps must be an integer >= 1, got inf"]),
    (["bb", "train", "--steps", "1.5"], ["steps must be an integer >= 1, got 1.5"]),
    (["bb", "train", "--lr", "1e300"], ["lr must be in (0, 10]", "1e+300"]),
    (["consensus", "simulate", "--beta", "1e300"], ["beta must be in [0, 10000]", "1e+300"]),
    # silent answers
    (["consensus", "simulate", "--scale", "1e300"], ["scale must be in [0, 1000]", "1e+300"]),
    (["consensus", "simulate", "--omega", "1e300"], ["omega must satisfy |omega| x h <= pi", "31.42", "1e+300"]),
    (["consensus", "phase", "--beta-max", "1e300"], ["beta_max must be in [0, 10000]"]),
    (["consensus", "phase", "--workers", "1000"], [f"workers must be an integer in [0, {CPUS}]", f"{CPUS} CPUs"]),
    (["bb", "compare", "{root}/a", "{root}/b", "{root}/a"], ["run_dirs: {root}/a is given twice"]),
    (["bb", "compare", "{root}/a", "{root}/./a"], ["is given twice"]),
    # hangs: run time estimated (a lower bound against 30 days) or the count held to its range
    (["bb", "train", "--steps", "1e12"], ["bb train --steps 1000000000000 would take at least", "30-day limit"]),
    (["scan", "--samples", "1000000"], ["samples must be an integer in [1, 20000]", "1000000"]),
    (["ablate", "--samples", "100000", "--head", "0.0"], ["samples must be an integer in [1, 20000]", "100000"]),
    (["paths", "sample", "--draws", "1e9"], ["--draws must be an integer in [4, 100000000]"]),
    (["paths", "prune", "--steps", "1e9"], ["--steps must be an integer in [1, 100000000]"]),
    (["series", "train", "--steps", "1e9"], ["steps must be an integer in [1, 100000000]"]),
    # memory estimated: one line with the estimate and the limit
    (["series", "train", "--batch", "1e8"], ["series train --batch 100000000", "GiB of memory (limit"]),
    (["paths", "sample", "--chains", "1e8"], ["paths sample --chains 100000000", "GiB of memory (limit"]),
    (["paths", "prune", "--width", "1e8"], ["paths prune --width 100000000", "GiB of memory (limit"]),
]


@pytest.mark.parametrize("argv, names", PROBES, ids=[" ".join(a[:3]) for a, _ in PROBES])
def test_probe_refused_in_one_line(argv: list[str], names: list[str], tmp_path: Path, capsys) -> None:
    message = refused(argv + OUT, tmp_path, capsys, seconds=5.0)
    for name in names:
        assert name.replace("{root}", str(tmp_path)) in message, message


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny `bb train` run whose final checkpoint's weights were overwritten with NaN in one tensor."""
    from attnlab.bb.config import resolve_config
    from attnlab.bb.run import train

    run = tmp_path_factory.mktemp("bb") / "run"
    sizes = dict(d_model=16, d_mlp=16, seq_len=16, batch=4, eval_batch=8, ckpt_every=2)
    train(resolve_config("cpu", steps=2, **sizes), run)
    model = sorted((run / "checkpoints").glob("step_*"))[-1] / "model.safetensors"
    weights = load_file(str(model))
    name = sorted(k for k in weights if k.startswith("blocks."))[0]
    weights[name] = torch.full_like(weights[name], math.nan)
    save_file(weights, str(model))
    return run


def test_subspace_on_nan_weights_names_the_tensor_and_file(nan_run: Path, tmp_path: Path, capsys) -> None:
    message = refused(["bb", "subspace", str(nan_run), *OUT], tmp_path, capsys)
    assert "model.safetensors" in message and "is not finite in" in message and "parameter blocks." in message


def test_the_python_api_refuses_alike() -> None:
    from attnlab.bb.config import resolve_config
    from attnlab.consensus.config import SimulateConfig
    from attnlab.paths.config import SampleConfig
    from attnlab.series.config import SeriesTrainConfig

    with pytest.raises(InputError, match="would take at least"):
        resolve_config("cpu", steps=10**12)
    with pytest.raises(InputError, match=r"beta must be in \[0, 10000\]"):
        SimulateConfig(beta=1e300)
    with pytest.raises(InputError, match="GiB of memory"):
        SampleConfig(chains=10**8)
    with pytest.raises(InputError, match="GiB of memory"):
        SeriesTrainConfig(batch=10**8)


def test_the_valid_edges_are_accepted() -> None:
    from attnlab.bb.config import MAX_LR, resolve_config
    from attnlab.consensus.config import MAX_BETA, MAX_SCALE, PhaseConfig, SimulateConfig
    from attnlab.hf.settings import MAX_SAMPLES, WindowSettings
    from attnlab.paths.config import MAX_ITERATIONS, PruneConfig, SampleConfig
    from attnlab.series.config import SeriesTrainConfig

    resolve_config("cpu", lr=MAX_LR, steps=10**9)  # 1e9 steps: a lower bound of about a day, under the limit
    SimulateConfig(beta=MAX_BETA, scale=MAX_SCALE, omega=-math.pi / 0.1, h=0.1, schedule="periodic")
    PhaseConfig(workers=CPUS, beta_max=MAX_BETA)
    WindowSettings(samples=MAX_SAMPLES)
    PruneConfig(steps=MAX_ITERATIONS)
    SampleConfig(draws=10**5, warmup=10**5)
    SeriesTrainConfig(steps=10**8, save_every=10**6)


def test_time_bound_and_check_int_edges() -> None:
    assert budget.min_seconds(10**6) == pytest.approx(100.0)  # the per-step floor
    assert budget.min_seconds(1, 1e18) == pytest.approx(1000.0)  # the throughput bound
    budget.check_time(budget.TIME_BUDGET_S, "x", "y")
    with pytest.raises(InputError, match="30-day limit"):
        budget.check_time(budget.TIME_BUDGET_S * 1.01, "x", "y")
    for bad in (math.inf, math.nan, 2.5, True):
        with pytest.raises(InputError, match="must be an integer"):
            check_int(bad, 0, "n")
    assert check_int(1e3, 0, "n", 1000) == 1000
