"""The sweep engine's cost: a 16-trial `bb train` sweep on Ray against the same trials one after another in one
process, and the consensus phase diagram's beta chunks as Ray tasks against the single-process run.

    python benchmarks/bench_sweep.py [--steps 100] [--cpus 2]

Prints wall times and ratios. Ray's start (about 3-4 s) is inside the sweep's time, as a user pays it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

SPEC = """command = "bb train"
[base]
preset = "cpu"
steps = {steps}
d_model = 64
d_mlp = 256
seq_len = 64
batch = 32
eval_batch = 64
[grid]
optimizer = ["adam", "sgd"]
lr = [1e-3, 3e-3]
seed = [0, 1, 2, 3]
"""


def sweep_on_ray(root: Path, steps: int, cpus: int) -> float:
    from attnlab.sweep import SweepConfig, load_spec, sweep

    (root / "spec.toml").write_text(SPEC.format(steps=steps))
    t0 = time.perf_counter()
    result = sweep(SweepConfig(spec=load_spec(root / "spec.toml"), cpus=cpus), root / "ray")
    assert result.summary["done"] == 16, result.summary
    return time.perf_counter() - t0


def sweep_in_process(root: Path, steps: int) -> float:
    from attnlab.bb.run import train
    from attnlab.core.clitools import threads
    from attnlab.sweep import load_spec
    from attnlab.sweep.plan import build_trials

    trials = build_trials(load_spec(root / "spec.toml"))
    t0 = time.perf_counter()
    with threads(1):
        for t in trials:
            train(t.config, root / "seq" / t.id, progress=False)
    return time.perf_counter() - t0


def phase(root: Path, workers: int, name: str) -> float:
    from attnlab.consensus.config import PhaseConfig
    from attnlab.consensus.run import phase as run_phase

    t0 = time.perf_counter()
    run_phase(PhaseConfig(num_betas=16, starts=64, t_max=10.0, workers=workers), root / name, progress=False)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--cpus", type=int, default=2)
    args = ap.parse_args()
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # a benchmark script: keep Ray on 127.0.0.1
    root = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    try:
        ray_s = sweep_on_ray(root, args.steps, args.cpus)
        seq_s = sweep_in_process(root, args.steps)
        print(f"16-trial bb train sweep ({args.steps} steps): Ray on {args.cpus} CPUs {ray_s:.1f} s, "
              f"one after another in one process {seq_s:.1f} s, ratio {seq_s / ray_s:.2f}x")  # fmt: skip
        one = phase(root, 0, "p1")
        many = phase(root, args.cpus, "p2")
        same = np.array_equal(np.load(root / "p1" / "frac.npy"), np.load(root / "p2" / "frac.npy"))
        print(f"phase diagram (16 betas, 64 starts, t <= 10): single process {one:.1f} s, Ray on {args.cpus} "
              f"workers {many:.1f} s, ratio {one / many:.2f}x, identical frac: {same}")  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
