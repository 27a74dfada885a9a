"""Consensus benchmarks (spec section 11): B1 batched simulation vs a per-token Python-loop baseline, B2 the
phase diagram at the issue's size. Prints a Markdown summary and writes JSON to --out.

    .venv/bin/python benchmarks/bench_consensus.py [--threads 2] [--repeats 3] [--skip-phase] [--out FILE]

B1: 256 starts, n = 32, d = 8, SA, Gaussian P (scale 1), V = I, t = 30, h = 0.1, float64. The baseline loops over
starts, tokens i and keys j in Python with NumPy vectors (projected Euler), on `--baseline-starts` starts and
`--baseline-steps` steps, extrapolated per start-step to the full workload (RK4 = 4 field evaluations per step).
B2: Q = K = V = I, SA, n = 32, d = 8, 90 betas in [0.1, 9], 256 starts each, t <= 30, h = 0.1, projected Euler.
attnlab's `phase_diagram` against the reference, re-implemented from GLPR's description of the diagram (for each
beta: Euler steps of the self-attention field on the sphere, x_i <- normalise(x_i + h P_x_i^perp sum_j softmax_j
(beta <x_i, x_j>) x_j), the clustered fraction every step, a finiteness check every step; written here, no code
copied), run interleaved in one process (A, B, A, B ...) with medians. `--phase-betas K` times every K-th beta only
(both sides the same betas) to fit a loaded machine; `--phase-rounds` sets the rounds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnlab.consensus.dynamics import AttentionSpec  # noqa: E402
from attnlab.consensus.integrators import integrate  # noqa: E402
from attnlab.consensus.schedules import Constant  # noqa: E402
from attnlab.consensus.sweeps import phase_diagram  # noqa: E402
from attnlab.core.clitools import threads  # noqa: E402


def baseline_euler(X: np.ndarray, P: np.ndarray, beta: float, h: float, steps: int) -> np.ndarray:
    """Per-token loop: for every start, token i and key j, scores, softmax and drive one by one (projected Euler)."""
    X = X.copy()
    B, n, d = X.shape
    for _ in range(steps):
        for b in range(B):
            new = np.empty((n, d))
            for i in range(n):
                xi = X[b, i]
                Pxi = xi @ P
                s = np.empty(n)
                for j in range(n):
                    s[j] = beta * float(Pxi @ X[b, j])
                w = np.exp(s - s.max())
                w /= w.sum()
                v = np.zeros(d)
                for j in range(n):
                    v += w[j] * X[b, j]
                y = xi + h * (v - float(xi @ v) * xi)
                new[i] = y / np.linalg.norm(y)
            X[b] = new
    return X


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: the CPU is shared; 2 threads on a loaded 2-core machine spin)",
    )
    ap.add_argument("--repeats", type=int, default=3, help="repeats of the batched runs (median reported)")
    ap.add_argument("--baseline-starts", type=int, default=2, help="starts run by the loop baseline (default 2)")
    ap.add_argument("--baseline-steps", type=int, default=20, help="steps run by the loop baseline (default 20)")
    ap.add_argument("--skip-phase", action="store_true", help="skip B2")
    ap.add_argument("--skip-b1", action="store_true", help="skip B1 (and its baseline)")
    ap.add_argument("--phase-float32", action="store_true", help="run B2 in float32 instead of float64")
    ap.add_argument("--phase-betas", type=int, default=1, help="B2 times every K-th of the 90 betas (default 1)")
    ap.add_argument("--phase-rounds", type=int, default=2, help="interleaved B2 rounds (median)")
    ap.add_argument("--skip-reference", action="store_true", help="B2 without the reference side")
    ap.add_argument("--out", type=Path, default=Path("runs/bench_consensus.json"), help="JSON results file")
    return ap


def bench_b1(args: argparse.Namespace, res: dict) -> None:
    """B1: batched Euler and RK4 (median of `--repeats`), then the loop baseline; fills `res`."""
    B, n, d, T, h, beta = 256, 32, 8, 30.0, 0.1, 1.0
    steps = int(round(T / h))
    g = torch.Generator().manual_seed(0)
    X0 = torch.randn(B, n, d, generator=g, dtype=torch.float64)
    X0 = X0 / X0.norm(dim=-1, keepdim=True)
    P = torch.randn(1, d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
    spec = AttentionSpec("SA", "full", torch.tensor([beta]))
    for method in ("euler", "rk4"):
        times = []
        cpu0 = time.process_time()
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            integrate(X0, Constant(P, None), spec, T, h, method, measures=("E_first",))
            times.append(time.perf_counter() - t0)
        res[f"B1_{method}_cpu_s_per_run"] = (time.process_time() - cpu0) / args.repeats
        res[f"B1_{method}_s"] = statistics.median(times)
        res[f"B1_{method}_all_s"] = times
    baseline(args, res, X0, P, spec, beta, h, B, steps)


def reference_phase(betas: np.ndarray, n: int, d: int, starts: int, t_max: float, h: float, seed: int, dtype):
    """The reference diagram `[beta, steps+1]`: one beta at a time, all starts batched, fresh tensors each step."""
    g = torch.Generator().manual_seed(seed)
    X0 = torch.randn(starts, n, d, generator=g, dtype=torch.float64)
    X0 = (X0 / X0.norm(dim=-1, keepdim=True)).to(dtype)
    steps = int(round(t_max / h))
    frac = np.zeros((len(betas), steps + 1))
    off_diag = ~torch.eye(n, dtype=torch.bool)
    for i, beta in enumerate(betas):
        X = X0.clone()
        for k in range(steps + 1):
            G = X @ X.transpose(-1, -2)
            frac[i, k] = float(((G >= 0.999) & off_diag).sum()) / (starts * n * (n - 1))
            if k == steps:
                break
            v = torch.softmax(beta * G, dim=-1) @ X
            Y = X + h * (v - (X * v).sum(-1, keepdim=True) * X)
            if not torch.isfinite(Y).all():
                raise FloatingPointError(f"non-finite state at step {k}")
            X = Y / Y.norm(dim=-1, keepdim=True)
    return frac


def bench_b2(args: argparse.Namespace, res: dict) -> None:
    """B2: the phase diagram at the issue's size (every `--phase-betas`-th beta), interleaved; fills `res`."""
    dtype = torch.float32 if args.phase_float32 else torch.float64
    betas = np.linspace(0.1, 9.0, 90)[:: args.phase_betas]
    sides = {
        "attnlab": lambda: phase_diagram(betas, n=32, d=8, starts=256, t_max=30.0, h=0.1, dtype=dtype).frac,
        "reference": lambda: reference_phase(betas, 32, 8, 256, 30.0, 0.1, 0, dtype),
    }
    if args.skip_reference:
        sides.pop("reference")
    times: dict[str, list[float]] = {k: [] for k in sides}
    out: dict[str, np.ndarray] = {}
    res["B2_load_before"] = os.getloadavg()
    for _ in range(args.phase_rounds):
        for name, fn in sides.items():
            t0 = time.perf_counter()
            out[name] = fn()
            times[name].append(time.perf_counter() - t0)
    res["B2_dtype"], res["B2_betas"] = str(dtype), len(betas)
    res["B2_phase_s"] = statistics.median(times["attnlab"])
    res["B2_phase_full_s_estimate"] = res["B2_phase_s"] * 90 / len(betas)
    res["B2_all_s"] = times
    if "reference" in out:
        res["B2_reference_s"] = statistics.median(times["reference"])
        res["B2_ratio"] = res["B2_reference_s"] / res["B2_phase_s"]
        res["B2_max_abs_diff_vs_reference"] = float(np.abs(out["attnlab"] - out["reference"]).max())


def _print_summary(res: dict) -> None:
    if "B1_euler_s" in res:
        print(
            f"| B1 Euler, 256x32x8, 300 steps | {res['B1_euler_s']:.2f} s | loop baseline (extrapolated) "
            f"{res['baseline_euler_full_s_extrapolated']:.0f} s | {res['B1_speedup_euler']:.0f}x |"
        )
        print(
            f"| B1 RK4, 256x32x8, 300 steps | {res['B1_rk4_s']:.2f} s | loop baseline (extrapolated) "
            f"{res['baseline_rk4_full_s_extrapolated']:.0f} s | {res['B1_speedup_rk4']:.0f}x |"
        )
    if "B2_phase_s" in res:
        ref = (
            f"reference {res['B2_reference_s']:.1f} s | {res['B2_ratio']:.2f}x (max |diff| "
            f"{res['B2_max_abs_diff_vs_reference']:.1e})"
            if "B2_ratio" in res
            else "| "
        )
        print(
            f"| B2 phase diagram {res['B2_betas']} of 90 betas x 256 starts, n=32, d=8, t<=30, h=0.1, "
            f"{res['B2_dtype']} | {res['B2_phase_s']:.1f} s (x 90/{res['B2_betas']} = "
            f"{res['B2_phase_full_s_estimate']:.1f} s) | {ref} |"
        )
    print(f"load average before/after: {res['load_avg_before']} / {res['load_avg_after']}")


def main() -> int:
    args = _parser().parse_args()
    res: dict = {"threads": args.threads, "load_avg_before": os.getloadavg(), "cpus": os.cpu_count()}
    with threads(args.threads):
        if not args.skip_b1:
            bench_b1(args, res)
        if not args.skip_phase:
            bench_b2(args, res)
    res["load_avg_after"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2))
    _print_summary(res)
    return 0


def baseline(
    args: argparse.Namespace,
    res: dict,
    X0: torch.Tensor,
    P: torch.Tensor,
    spec: AttentionSpec,
    beta: float,
    h: float,
    B: int,
    steps: int,
) -> None:
    """Run the loop baseline on a few starts, check it against our Euler, and extrapolate (fills `res`)."""
    Xb = X0[: args.baseline_starts].numpy()
    t0 = time.perf_counter()
    Yb = baseline_euler(Xb, P[0].numpy(), beta, h, args.baseline_steps)
    tb = time.perf_counter() - t0
    res["baseline_wall_s"] = tb
    ref = integrate(
        X0[: args.baseline_starts], Constant(P, None), spec, args.baseline_steps * h, h, "euler", measures=()
    ).final.numpy()
    res["baseline_max_abs_diff"] = float(np.abs(Yb - ref).max())
    per_start_step = tb / (args.baseline_starts * args.baseline_steps)
    res["baseline_per_start_step_s"] = per_start_step
    res["baseline_euler_full_s_extrapolated"] = per_start_step * B * steps
    res["baseline_rk4_full_s_extrapolated"] = 4 * per_start_step * B * steps
    res["B1_speedup_euler"] = res["baseline_euler_full_s_extrapolated"] / res["B1_euler_s"]
    res["B1_speedup_rk4"] = res["baseline_rk4_full_s_extrapolated"] / res["B1_rk4_s"]


if __name__ == "__main__":
    sys.exit(main())
