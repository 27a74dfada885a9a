"""`attnlab paths {solve, sweep, sample, prune}` and this study's part of `attnlab demo` (spec §11)."""

from __future__ import annotations

import argparse
from pathlib import Path

from attnlab.report import Report


def _common(p: argparse.ArgumentParser, N: bool = True) -> None:
    p.add_argument("--task", choices=["markov", "digits"], default="markov", help="task (default markov)")
    p.add_argument("--variant", choices=["4path", "2path", "good1", "good2"], default="4path",
                   help="Markov network: 4path (2x2 heads), 2path (sigma_out=5), good1/good2 (H=1); default 4path")
    p.add_argument("--heads", type=int, default=2, help="digits: heads per layer (default 2)")
    p.add_argument("--layers", type=int, default=2, help="digits: layers (default 2)")
    p.add_argument("--P", type=int, default=100, help="training examples (default 100)")
    p.add_argument("--n-test", type=int, default=1000, help="test examples (default 1000)")
    if N:
        p.add_argument("--N", type=float, default=10.0, help="width N of every layer; inf gives the GP limit (default 10)")
    p.add_argument("--temperature", type=float, default=0.01, help="temperature T > 0 (default 0.01)")
    p.add_argument("--entropy-form", choices=["chain", "simple"], default="chain",
                   help="entropy of the action: chain (multi-order-parameter) or simple (default chain)")
    p.add_argument("--memory-budget", type=float, default=None,
                   help="bytes allowed for kernels (default 50%% of available memory)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--out", type=Path, default=None, help="run folder (default runs/paths-<command>-<timestamp>)")


def _solver_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", choices=["newton", "lbfgs", "fixed_point"], default="newton",
                   help="solver (default newton: L-BFGS then Newton)")
    p.add_argument("--tol", type=float, default=1e-8, help="stop when max|dS/dU| < tol (default 1e-8)")
    p.add_argument("--allow-unconverged", action="store_true", help="exit 0 even if the solver hits its cap")


def register(subparsers) -> None:
    """Add the `paths` group and its subcommands."""
    from attnlab.paths import commands, commands_sample

    grp = subparsers.add_parser("paths", help="attention paths: kernel theory, solver, sampling, pruning",
                                description="Statistical-mechanics theory of attention paths (spec attention-paths).")
    sub = grp.add_subparsers(dest="paths_command", metavar="SUBCOMMAND")
    p = sub.add_parser("solve", help="solve the order parameter U at one (N, T) point",
                       description="Writes U.npy, kernels.npz, metrics.json, figures and report.html.")
    _common(p)
    _solver_opts(p)
    p.set_defaults(func=commands.cmd_solve)
    p = sub.add_parser("sweep", help="accuracy vs alpha over widths, with the GP baselines")
    _common(p, N=False)
    p.add_argument("--Ns", type=float, nargs="+", default=commands.DEFAULT_NS, help="widths (default 10 30 ... 1000)")
    _solver_opts(p)
    p.set_defaults(func=commands.cmd_sweep)
    p = sub.add_parser("sample", help="HMC/MALA posterior sampling: sampled U and predictor vs theory")
    _common(p)
    commands_sample.add_sampler_opts(p)
    p.set_defaults(func=commands_sample.cmd_sample)
    p = sub.add_parser("prune", help="head scores from U vs pruning drops of a gradient-descent-trained network")
    commands_sample.add_prune_opts(p)
    p.set_defaults(func=commands_sample.cmd_prune)
    grp.set_defaults(func=lambda a: (grp.print_help(), 1)[1])


def run_demo(out: Path, seed: int) -> Report:
    """A small Markov sweep (P = 100, 7 widths, T = 0.01, GP baselines, alignment); about 10 s on 2 cores."""
    import torch

    from attnlab.paths.commands import DEFAULT_NS, run_sweep
    from attnlab.paths.experiment import build_data
    from attnlab.runs import RunDir

    torch.set_num_threads(1)
    run = RunDir(Path(out) / "paths-sweep", "paths")
    run.write_config({"command": "paths demo (sweep)", "task": "markov", "P": 100, "n_test": 1000,
                      "Ns": DEFAULT_NS, "temperature": 0.01, "entropy_form": "chain", "seed": seed})
    run.write_manifest(seed)
    data = build_data("markov", 100, 1000, seed=seed)
    rep, _ = run_sweep(data, DEFAULT_NS, 0.01, "chain", "newton", 1e-8, run,
                       "Attention paths: Markov sweep (kernel renormalisation vs GP)")
    rep.paragraph(f"Run folder: {run.path}")
    rep.write(run.path / "report.html")
    return rep
