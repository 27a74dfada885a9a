"""B4: which entropy form matches posterior sampling? (spec §10, reduced CPU protocol).

For configurations C1 (H=1, L=1), C2 (H=1, L=2), C3 (the 4-path network) on Markov inputs, alpha in {4, 1},
N in {8, 16, 32}, T = 0.1: solve the chain and simple forms and run collapsed HMC on the same data; then fit
U_hat(N) - U_f(N) = a_f + b_f/N per diagonal entry. Plus C3 at the paper's point (P = 100, T = 0.01, N = 10).
Writes points.jsonl, summary.json and figures/entropy_forms.png under --out; prints a table.

    .venv/bin/python benchmarks/bench_paths_entropy.py --out runs/paths-entropy
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from attnlab.core.clitools import threads
from attnlab.paths.sampling.adjudicate import compare_point, extrapolate
from attnlab.runs import read_jsonl, to_jsonable, write_jsonl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("runs/paths-entropy"), help="output folder")
    ap.add_argument("--warmup", type=int, default=300, help="HMC warmup per chain (spec: 1000)")
    ap.add_argument("--draws", type=int, default=600, help="HMC draws per chain (spec: 2000)")
    ap.add_argument("--leapfrog", type=int, default=8, help="leapfrog steps (spec default 16)")
    ap.add_argument("--Ns", type=int, nargs="+", default=[8, 16, 32], help="widths")
    ap.add_argument("--alphas", type=float, nargs="+", default=[4.0, 1.0], help="alpha = P/N values")
    ap.add_argument("--configs", nargs="+", default=["C2", "C1", "C3"], help="configurations")
    ap.add_argument("--n-test", type=int, default=300, help="test examples for the predictor comparison")
    ap.add_argument("--paper-point", action="store_true", help="also run C3 at P=100, T=0.01, N=10")
    args = ap.parse_args()
    with threads(1):
        run(args)


def run(args: argparse.Namespace) -> None:
    """Every (config, alpha, N) point not yet in points.jsonl, then the extrapolation and the figure."""
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "points.jsonl"
    done = read_jsonl(log)  # a line cut by a kill is dropped, and the file rewritten without it
    write_jsonl(log, done)
    key = lambda p: (p["config"], p["alpha"], p["N"], p["T"])  # noqa: E731
    have = {key(p) for p in done}
    jobs = [(c, a, N, 0.1) for a in args.alphas for c in args.configs for N in args.Ns]
    if args.paper_point:
        jobs.append(("C3", 10.0, 10, 0.01))
    for c, a, N, T in jobs:
        if (c, a, N, T) in have:
            continue
        t0 = time.perf_counter()
        r = to_jsonable(
            compare_point(
                c, a, N, T, warmup=args.warmup, draws=args.draws, n_leapfrog=args.leapfrog, n_test=args.n_test
            )
        )
        done.append(r)
        with open(log, "a") as f:
            f.write(json.dumps(r) + "\n")
        print(
            f"{c} alpha={a:g} N={N} T={T}: s={r['s']:.3f} e_chain={r['e_chain']:.3f} e_simple={r['e_simple']:.3f} "
            f"R-hat={r['rhat_max']:.3f} ESS={r['ess_bulk_min']:.0f} ({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    summary = []
    for c in args.configs:
        for a in args.alphas:
            pts = sorted(
                [p for p in done if p["config"] == c and p["alpha"] == a and p["T"] == 0.1], key=lambda p: p["N"]
            )
            if len(pts) < 3:
                continue
            row = {"config": c, "alpha": a}
            for form in ("chain", "simple"):
                ex = extrapolate(pts, form)
                row[f"a_{form}"], row[f"se_{form}"], row[f"max_abs_z_{form}"] = (
                    ex["a"],
                    ex["se"],
                    float(np.abs(ex["z"]).max()),
                )
            summary.append(row)
    (args.out / "summary.json").write_text(
        json.dumps(to_jsonable({"points": done, "extrapolation": summary}), indent=1)
    )
    _figure(done, args.out / "figures" / "entropy_forms.png")


def _figure(points: list[dict], path: Path) -> None:
    from attnlab.reports.plotting import new_figure, save_figure

    panels = sorted({(p["config"], p["alpha"]) for p in points if p["T"] == 0.1})
    if not panels:
        return
    fig, axes = new_figure(len(panels), 1, 3.6, 3.2)
    for ax, (c, a) in zip(axes[0], panels):
        pts = sorted(
            [p for p in points if p["config"] == c and p["alpha"] == a and p["T"] == 0.1], key=lambda p: p["N"]
        )
        Ns = [p["N"] for p in pts]
        ax.plot(Ns, [np.asarray(p["U_chain"])[0, 0] for p in pts], "o-", label="chain")
        ax.plot(Ns, [np.asarray(p["U_simple"])[0, 0] for p in pts], "s--", label="simple")
        ax.errorbar(
            Ns,
            [np.asarray(p["U_hat"])[0, 0] for p in pts],
            yerr=[2 * np.asarray(p["U_mcse"])[0, 0] for p in pts],
            fmt="k^",
            label="sampled +-2 MCSE",
        )
        ax.set_xscale("log", base=2)
        ax.set_title(f"{c}, alpha={a:g}: U[0,0]", fontsize=9)
        ax.set_xlabel("N")
    axes[0, 0].legend(fontsize=7)
    save_figure(fig, path)


if __name__ == "__main__":
    main()
