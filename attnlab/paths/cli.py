"""`attnlab paths {solve, sweep, sample, prune}`: argparse <-> config, nothing else (docs/attention-paths.md)."""

from __future__ import annotations

import argparse
from typing import Any

from attnlab.core.clitools import add_device_arg, add_run_args, count, run_mode, threads

COMMON = ("task", "variant", "heads", "layers", "P", "n_test", "temperature", "entropy_form", "memory_budget",
          "seed", "method")  # fmt: skip


def _fields(args: argparse.Namespace, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(args, name) for name in names}


def _solve_config(args: argparse.Namespace) -> Any:
    from attnlab.paths.config import SolveConfig

    return SolveConfig(
        **_fields(
            args, COMMON + ("N", "tol", "allow_unconverged", "renorm", "outputs", "attention", "from_run", "device")
        )
    )


def _sweep_config(args: argparse.Namespace) -> Any:
    from attnlab.paths.config import SweepConfig

    return SweepConfig(Ns=tuple(args.Ns), **_fields(args, COMMON + ("tol", "allow_unconverged", "device")))


def _sample_config(args: argparse.Namespace) -> Any:
    from attnlab.paths.config import SampleConfig

    names = (
        "N",
        "sampler",
        "target",
        "chains",
        "warmup",
        "draws",
        "leapfrog",
        "thin",
        "predict_every",
        "outputs",
        "device",
        "doublings",
    )
    return SampleConfig(**_fields(args, COMMON + names))


def _prune_config(args: argparse.Namespace) -> Any:
    from attnlab.paths.config import PruneConfig

    names: tuple[str, ...] = ("steps", "heads", "layers", "width", "d_qk", "P", "n_test", "pool", "seed", "device")
    names += ("lr", "weight_decay", "augment")
    return PruneConfig(Ns=tuple(args.Ns), temperatures=tuple(args.temperatures), **_fields(args, names))


def _solve(args: argparse.Namespace) -> int:
    from attnlab.paths.run import solve

    cfg = _solve_config(args)
    with threads(args.threads):
        result = solve(cfg, args.out, mode=run_mode(args))
    s = result.summary
    print(f"accuracy {s['accuracy']:.4f} (GP {s['accuracy_gp']:.4f}), max|grad| {s['max_grad']:.2e}, "
          f"{s['iterations']} iterations, converged={s['converged']}")  # fmt: skip
    if "network_accuracy" in s:
        print(f"the trained network itself: accuracy {s['network_accuracy']:.4f}")
    print(f"run folder: {result.path}")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from attnlab.paths.run import sweep

    cfg = _sweep_config(args)
    with threads(args.threads):
        result = sweep(cfg, args.out, mode=run_mode(args))
    if result.summary.get("nothing_to_do"):
        print(result.summary["nothing_to_do"])
        return 0
    for _, r in result.tables["points"].iterrows():
        N = float(r["N"])  # the GP limit's width is stored as the text "inf"
        print(f"N={N:g}: accuracy {r['accuracy']:.4f} (GP {r['accuracy_gp']:.4f}) converged={r['converged']}")
    print(f"run folder: {result.path}")
    return 0


def _sample(args: argparse.Namespace) -> int:
    from attnlab.paths.run import sample

    cfg = _sample_config(args)
    with threads(args.threads):
        result = sample(cfg, args.out, mode=run_mode(args))
    s = result.summary
    if not s["converged"]:
        rhat = "n/a" if s["rhat_max"] != s["rhat_max"] else f"{s['rhat_max']:.3f}"
        ess = "n/a" if s["ess_bulk_min"] != s["ess_bulk_min"] else f"{s['ess_bulk_min']:.0f}"
        print(f"warning: sampler gates failed (R-hat {rhat}, bulk ESS {ess}); results carry converged=false")
    sampled = "n/a" if s["sampled_accuracy"] is None else f"{s['sampled_accuracy']:.4f}"
    print(f"sampled U vs {cfg.entropy_form} theory: relative Frobenius error {s['rel_frob_err']:.3f}; "
          f"accuracy sampled {sampled}, theory {s['theory_accuracy']:.4f}")  # fmt: skip
    print(f"run folder: {result.path}")
    return 0


def _prune(args: argparse.Namespace) -> int:
    from attnlab.paths.run import prune

    cfg = _prune_config(args)
    with threads(args.threads):
        result = prune(cfg, args.out, mode=run_mode(args))
    s = result.summary
    print(f"GD test accuracy {s['gd_test_accuracy']:.3f}; Spearman rho(score, GD drop) = {s['spearman_rho']:.2f}, "
          f"rho(score, theory drop) = {s['spearman_rho_theory']:.2f}")  # fmt: skip
    print(f"run folder: {result.path}")
    return 0


def _ensemble_config(args: argparse.Namespace) -> Any:
    from attnlab.paths.config import EnsembleConfig

    return EnsembleConfig(**_fields(args, COMMON + ("N", "runs", "steps", "lr", "sampled")))


def _ensemble(args: argparse.Namespace) -> int:
    from attnlab.paths.run import ensemble

    cfg = _ensemble_config(args)
    with threads(args.threads):
        result = ensemble(cfg, args.out, mode=run_mode(args))
    s = result.summary
    print(f"U_GD ({cfg.runs} runs) vs {cfg.entropy_form} theory: relative Frobenius error "
          f"{s['rel_frob_err_gd']:.3f} (run-to-run standard error {s['run_spread']:.3f}); accuracy with U_GD "
          f"{s['accuracy_U_gd']:.4f}, theory {s['theory_accuracy']:.4f}")  # fmt: skip
    print(f"run folder: {result.path}")
    return 0


def _task_args(p: argparse.ArgumentParser, N: bool = True) -> None:
    p.add_argument("--task", default="markov", help="markov or digits (default markov)")
    p.add_argument(
        "--variant",
        default="4path",
        help="Markov network: 4path (2x2 heads), 2path (sigma_out=5), good1/good2 (H=1); default 4path",
    )
    p.add_argument("--heads", type=count, default=2, help="digits: heads per layer (default 2)")
    p.add_argument("--layers", type=count, default=2, help="digits: layers (default 2)")
    p.add_argument("--P", type=count, default=100, help="training examples, even (default 100)")
    p.add_argument("--n-test", type=count, default=1000, help="test examples, even (default 1000)")
    if N:
        p.add_argument(
            "--N", type=float, default=10.0, help="width N of every layer; inf gives the GP limit (default 10)"
        )
    p.add_argument("--temperature", type=float, default=0.01, help="temperature T > 0 (default 0.01)")
    p.add_argument(
        "--entropy-form",
        default="chain",
        help="entropy of the action: chain (multi-order-parameter) or simple (default chain)",
    )
    p.add_argument(
        "--memory-budget", type=float, default=None, help="bytes allowed for kernels (default 50%% of available memory)"
    )
    p.add_argument(
        "--method", default="newton", help="solver: newton (L-BFGS then Newton, default), lbfgs or fixed_point"
    )


def _solver_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tol", type=float, default=1e-8, help="stop when max|dS/dU| < tol (default 1e-8)")
    p.add_argument("--allow-unconverged", action="store_true", help="exit 0 even if the solver hits its cap")


def _sampler_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sampler", default="hmc", help="hmc or mala (default hmc)")
    p.add_argument(
        "--target", default="collapsed", help="posterior: collapsed (V0 integrated out, default) or full (all weights)"
    )
    p.add_argument("--chains", type=count, default=4, help="chains (default 4)")
    p.add_argument("--warmup", type=count, default=1000, help="warmup iterations (default 1000)")
    p.add_argument("--draws", type=count, default=2000, help="kept draws per chain, >= 4 (default 2000)")
    p.add_argument("--leapfrog", type=count, default=16, help="HMC leapfrog steps (default 16)")
    p.add_argument("--thin", type=count, default=1, help="keep every k-th draw (default 1)")
    p.add_argument("--predict-every", type=count, default=5, help="update the predictor every k kept draws (default 5)")
    p.add_argument(
        "--doublings",
        type=count,
        default=0,
        help="rerun with doubled --draws up to this many times until the sampler gates pass (default 0)",
    )


def _outputs_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--outputs",
        type=count,
        default=1,
        help="Markov outputs M in 1..4 (class, last, first, majority observed state); U gets output indices (S8)",
    )


def _prune_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=count, default=300, help="gradient-descent steps (default 300; spec default 3000)")
    p.add_argument("--heads", type=count, default=4, help="heads per layer, >= 2 (default 4)")
    p.add_argument("--layers", type=count, default=2, help="layers (default 2)")
    p.add_argument("--width", type=count, default=128, help="GD network width (default 128)")
    p.add_argument("--d-qk", type=count, default=16, help="query/key dimension (default 16)")
    p.add_argument("--P", type=count, default=300, help="theory episodes, even (default 300)")
    p.add_argument("--n-test", type=count, default=1000, help="test episodes, even (default 1000)")
    p.add_argument("--Ns", type=float, nargs="+", default=[20.0, 200.0], help="theory widths tried on validation")
    p.add_argument("--temperatures", type=float, nargs="+", default=[0.1, 1.0], help="temperatures tried on validation")
    p.add_argument("--pool", type=count, default=4000, help="training episodes pool for GD batches (default 4000)")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate of the GD network (default 1e-3)")
    p.add_argument("--weight-decay", type=float, default=5e-5, help="Adam weight decay (default 5e-5)")
    p.add_argument(
        "--augment",
        default="none",
        help="none (default) or dihedral: one random rotation/flip per GD training episode, its three images alike",
    )
    p.add_argument("--seed", type=count, default=42, help="random seed (default 42)")


def _solve_parser(sub: argparse._SubParsersAction) -> None:
    """`paths solve`: the theory at one (N, T) point (with the S8-S10 options)."""
    p = sub.add_parser(
        "solve",
        help="solve the order parameter U at one (N, T) point",
        description="Writes U.npy, kernels.npz, metrics.json, figures and report.html.",
    )
    _task_args(p)
    _solver_args(p)
    p.add_argument(
        "--renorm",
        default="matrix",
        help="matrix (full U over path pairs, default) or scalar (U = u Sigma^2 I: a rescaled GP; spec S9)",
    )
    _outputs_arg(p)
    p.add_argument(
        "--attention",
        default="task",
        help="task (the task's own heads, default) or precomputed (a trained network's maps, with --from; S10)",
    )
    p.add_argument("--from", dest="from_run", default=None, help="`paths prune` run folder whose gd_model to plug in")
    add_device_arg(p, "float64; the solve (path kernels, K+TI and its Cholesky, Newton's Hessian) runs there, "
                   "scipy's L-BFGS steps and the test predictor on the cpu")  # fmt: skip
    add_run_args(p, threads_default=1)
    p.set_defaults(func=_solve, make_config=_solve_config)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `paths` group and its subcommands."""
    from attnlab.paths.config import DEFAULT_NS

    grp = subparsers.add_parser(
        "paths",
        help="attention paths: kernel theory, solver, sampling, pruning",
        description="Statistical-mechanics theory of attention paths (spec attention-paths).",
    )
    sub = grp.add_subparsers(dest="paths_command", metavar="SUBCOMMAND")
    _solve_parser(sub)
    p = sub.add_parser(
        "sweep",
        help="accuracy vs alpha over widths, with the GP baselines",
        description="One metrics.jsonl line per width; --resume continues an interrupted sweep.",
    )
    _task_args(p, N=False)
    p.add_argument("--Ns", type=float, nargs="+", default=list(DEFAULT_NS), help="widths (default 10 30 ... 1000)")
    _solver_args(p)
    add_device_arg(p, "float64; each width's solve runs there, scipy's L-BFGS steps and the predictor on the cpu")
    add_run_args(p, threads_default=1, resume=True)
    p.set_defaults(func=_sweep, make_config=_sweep_config)
    p = sub.add_parser("sample", help="HMC/MALA posterior sampling: sampled U and predictor vs theory")
    _task_args(p)
    _sampler_args(p)
    _outputs_arg(p)
    add_device_arg(p, "float64; the chains run there, the theory solve on the cpu; --outputs > 1 is cpu only")
    add_run_args(p, threads_default=1)
    p.set_defaults(func=_sample, make_config=_sample_config)
    p = sub.add_parser(
        "ensemble",
        help="U from an ensemble of gradient-descent runs with frozen attention vs the theory (S7)",
        description="Trains the value weights --runs times from prior draws (Adam on the negative log posterior); "
        "writes U.npy, U_gd.npy, U_runs.npy, metrics.json, figures and report.html.",
    )
    _task_args(p)
    p.add_argument("--runs", type=count, default=16, help="gradient-descent runs, >= 2 (default 16)")
    p.add_argument("--steps", type=count, default=3000, help="full-batch Adam steps per run (default 3000)")
    p.add_argument("--lr", type=float, default=0.03, help="initial learning rate, decayed 50x (default 0.03)")
    p.add_argument("--sampled", default=None, help="a `paths sample` run folder (same task, N, T) to compare with")
    add_run_args(p, threads_default=1)
    p.set_defaults(func=_ensemble, make_config=_ensemble_config)
    p = sub.add_parser("prune", help="head scores from U vs pruning drops of a gradient-descent-trained network")
    _prune_args(p)
    add_device_arg(p, "the GD training (float32) and the theory solves (float64) run there; the trained "
                   "network's evaluations on the cpu")  # fmt: skip
    add_run_args(p, seed=False, threads_default=1)
    p.set_defaults(func=_prune, make_config=_prune_config)
    grp.set_defaults(func=lambda a: (grp.print_help(), 1)[1])
