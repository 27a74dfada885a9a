"""Attention-paths benchmarks (spec §13 B1, B3), each beside its baseline run in the same process.

B1: solver time to max|dS/dU| < 1e-8 on the Markov task (P=100, H=2, L=2, T=0.01) per width, against a plain Adam
    loop on the same action (Cholesky parametrisation, lr 0.1, analytic U-gradient each step, stop at 1e-5,
    up to 50,000 steps) at the chosen baseline widths; the U difference is reported.
B3: collapsed HMC at N=10 (4 chains): wall time, ESS/s, relative Frobenius error of U_hat vs the chain theory.

    .venv/bin/python benchmarks/bench_paths.py --out runs/paths-bench
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from attnlab.core.clitools import threads
from attnlab.paths.tasks.data import build_data
from attnlab.paths.theory.action import evaluate
from attnlab.paths.theory.points import make_problem
from attnlab.paths.theory.solver import Param
from attnlab.paths.theory.solver import solve_saddle_point as solve
from attnlab.runs import to_jsonable


def adam_baseline(prob, lr: float = 0.1, tol: float = 1e-5, max_steps: int = 50_000) -> dict:
    """Plain Adam on theta (U = R R^T) with the analytic action gradient; stops at max|dS/dU| < tol."""
    par = Param(prob.sizes())
    theta = par.from_Us(prob.gp_point()).clone().requires_grad_(False)
    opt = torch.optim.Adam([theta.requires_grad_(True)], lr=lr)
    t0, c0 = time.perf_counter(), time.process_time()
    step = 0
    for step in range(1, max_steps + 1):  # noqa: B007 - the last step is reported
        with torch.no_grad():
            Rs = par.Rs(theta)
            ev = evaluate(prob, [R @ R.T for R in Rs])
            mg = max(float(g.abs().max()) for g in ev.grads)
            if mg < tol:
                break
            theta.grad = par.grad_theta(Rs, ev.grads)
        opt.step()
    return {
        "steps": step,
        "max_grad": mg,
        "wall_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
        "U": par.Us(theta.detach())[0].numpy(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("runs/paths-bench"), help="output folder")
    ap.add_argument("--Ns", type=float, nargs="+", default=[10, 30, 50, 100, 300, 500, 1000], help="B1 widths")
    ap.add_argument("--adam-Ns", type=float, nargs="+", default=[10], help="widths for the Adam baseline")
    ap.add_argument("--repeats", type=int, default=3, help="timing repeats (the minimum is reported)")
    ap.add_argument("--sample-warmup", type=int, default=200, help="B3 warmup")
    ap.add_argument("--sample-draws", type=int, default=400, help="B3 draws")
    ap.add_argument("--skip-sampling", action="store_true", help="skip B3")
    args = ap.parse_args()
    with threads(1):
        run(args)


def b1_row(data, N: float, repeats: int, adam_Ns: list[float]) -> dict:
    """B1 at one width: the best of `repeats` solver timings, and the Adam baseline at the chosen widths."""
    prob = make_problem(data, N, 0.01)
    times, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        sp = solve(prob, "newton", tol=1e-8, hessian=False)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    row = {"N": N, "solver_s": min(times), "solver_cpu_s": min(cpu), "iterations": sp.iterations,
           "max_grad": sp.max_grad, "converged": sp.converged}  # fmt: skip
    if N in adam_Ns:
        ad = adam_baseline(prob)
        row.update({"adam_s": ad["wall_s"], "adam_cpu_s": ad["cpu_s"], "adam_steps": ad["steps"],
                    "adam_max_grad": ad["max_grad"], "speedup": ad["wall_s"] / min(times),
                    "max_abs_dU": float(np.abs(ad["U"] - sp.U).max())})  # fmt: skip
    return row


def b3(data, warmup: int, draws: int) -> dict:
    """B3: collapsed HMC at N = 10 (4 chains, 16 leapfrog steps) against the chain theory there."""
    from attnlab.paths.sampling.posterior import sample_point
    from attnlab.paths.theory.points import theory_point

    sp, _ = theory_point(data, 10, 0.01)
    rec = sample_point(data, 10, 0.01, 4, warmup, draws, "hmc", 16, 1, 5, 0, False)
    keys = ["wall_s", "ess_bulk_min", "ess_per_s", "rhat_max", "accept_mean", "divergences", "sampled_accuracy"]
    return {k: rec[k] for k in keys} | {
        "warmup": warmup, "draws": draws, "chains": 4, "leapfrog": 16,
        "rel_frob_err": float(np.linalg.norm(rec["U_hat"] - sp.U) / np.linalg.norm(sp.U)),
        "U_hat": rec["U_hat"], "U_mcse": rec["U_mcse"], "U_theory": sp.U,
    }  # fmt: skip


def run(args: argparse.Namespace) -> None:
    """B1 and B3 with the parsed options; writes bench.json under args.out."""
    from attnlab.paths.theory.points import theory_sweep as sweep

    args.out.mkdir(parents=True, exist_ok=True)
    data = build_data("markov", 100, 1000)
    rows = []
    for N in args.Ns:
        rows.append(b1_row(data, N, args.repeats, args.adam_Ns))
        print(json.dumps(to_jsonable(rows[-1])), flush=True)
    t0 = time.perf_counter()
    sweep(data, args.Ns, 0.01, progress=False)
    sweep_s = time.perf_counter() - t0
    result = {"B1": rows, "B1_sweep_s": sweep_s, "load_avg": os.getloadavg()}
    print(f"B1 sweep of {len(args.Ns)} widths incl. GP baselines and 1000-point predictions: {sweep_s:.2f} s")
    if not args.skip_sampling:
        result["B3"] = b3(data, args.sample_warmup, args.sample_draws)
        print(json.dumps(to_jsonable({k: v for k, v in result["B3"].items() if not k.startswith("U_")})))
    result["load_avg_end"] = os.getloadavg()
    (args.out / "bench.json").write_text(json.dumps(to_jsonable(result), indent=1))


if __name__ == "__main__":
    main()
