"""`attnlab consensus simulate|phase|model`: argparse <-> config, nothing else (see docs/consensus.md)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from attnlab.core.clitools import add_device_arg, add_run_args, count, loopback_ray, run_mode, threads


def _from_args(cls: type, args: argparse.Namespace) -> Any:
    """The config `cls` from the parsed options of the same names (`--t-max` -> `t_max`)."""
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})


def _simulate_config(args: argparse.Namespace) -> Any:
    from attnlab.consensus.config import SimulateConfig

    return _from_args(SimulateConfig, args)


def _phase_config(args: argparse.Namespace) -> Any:
    from attnlab.consensus.config import PhaseConfig

    return _from_args(PhaseConfig, args)


def _simulate(args: argparse.Namespace) -> int:
    from attnlab.consensus.run import simulate

    cfg = _simulate_config(args)
    with threads(args.threads):
        result = simulate(cfg, args.out, mode=run_mode(args))
    final = result.summary["final_E_first"]
    print(
        f"median final E_first: {final['median']:.3e}; "
        f"share below 1e-6: {result.summary['share_E_first_below_1e-6']:.2f}"
    )
    print(f"run folder: {result.path}")
    return 0


def _phase(args: argparse.Namespace) -> int:
    from attnlab.consensus.run import phase

    cfg = _phase_config(args)
    with threads(args.threads), loopback_ray(cfg.address is None):
        result = phase(cfg, args.out, mode=run_mode(args))
    print(
        f"phase diagram: {result.summary['wall_seconds']} s; median |t50/t_eq - 1| = "
        f"{result.summary['median_abs_relative_gap']}"
    )
    print(f"run folder: {result.path}")
    return 0


def _model_config(args: argparse.Namespace) -> Any:
    from attnlab.consensus.config import ModelConfig

    return ModelConfig(
        model=args.model,
        passes=args.passes,
        schedules=tuple(args.schedule or ["periodic"]),
        layer=args.layer,
        mlp=(True, False) if args.both_mlp else (not args.no_mlp,),
        domains=tuple(d.strip() for d in args.domains.split(",") if d.strip()),
        prompts=args.prompts,
        seq_len=args.seq_len,
        feedback_final_norm=args.feedback_final_norm,
        depth_view=not args.no_depth_view,
        cache_dir=None if args.cache_dir is None else str(args.cache_dir),
        seed=args.seed,
        device=args.device,
    )


def _model(args: argparse.Namespace) -> int:
    from attnlab.consensus.run import model

    cfg = _model_config(args)
    with threads(args.threads):
        result = model(cfg, args.out, mode=run_mode(args))
    for g, s in result.summary["groups"].items():
        print(
            f"{g}: mean log10 E_first fell by {s['fall_pass1_to_last']:.2f} (CI {s['fall_ci95'][0]:.2f}.."
            f"{s['fall_ci95'][1]:.2f}) from pass 1 to {args.passes}"
        )
    print(f"run folder: {result.path}")
    return 0


def _simulate_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser(
        "simulate",
        help="integrate the SA/USA dynamics for a batch of random starts",
        description="Integrates x_i' = P_perp(sum_h sum_j alpha_ij V_h x_j) for a batch of uniform "
        "starts; writes E.npy, t.npy, x0.npy, weights.npz, metrics.json and figures.",
    )
    s.add_argument("--n", type=count, default=32, help="tokens per start (>= 2, default 32)")
    s.add_argument("--d", type=count, default=3, help="dimension (>= 2, default 3; d = 3 adds sphere plots)")
    s.add_argument("--batch", type=count, default=64, help="number of random starts (default 64)")
    s.add_argument("--beta", type=float, default=1.0, help="inverse temperature of every head (default 1)")
    s.add_argument("--heads", type=count, default=1, help="attention heads (default 1)")
    s.add_argument("--kind", default="SA", help="SA (softmax) or USA (unnormalised, 1/n) (default SA)")
    s.add_argument("--mask", default="full", help="full or causal (default full)")
    s.add_argument("--schedule", default="constant", help="constant, periodic, cycle or random (default constant)")
    s.add_argument(
        "--key-query",
        default="gaussian",
        help="P = Q^T K: gaussian (std scale/sqrt(d)), goe, identity or zero (Q = K = 0: uniform attention) "
        "(default gaussian)",
    )
    s.add_argument(
        "--value",
        default="identity",
        help="V: identity, random (Gaussian) or rotation (skew J, pi/2 in each plane) (default identity)",
    )
    s.add_argument("--scale", type=float, default=1.0, help="scale sigma of random weights (default 1)")
    s.add_argument("--omega", type=float, default=1.0, help="frequency of the periodic schedule (default 1)")
    s.add_argument(
        "--delta", type=float, default=1.0, help="interval of cycle/random schedules, a multiple of h (default 1)"
    )
    s.add_argument("--layers", type=count, default=4, help="number of layers cycled by the cycle schedule (default 4)")
    s.add_argument("--t-max", type=float, default=30.0, help="final time (default 30; at most 10^6 steps t_max/h)")
    s.add_argument("--h", type=float, default=0.1, help="step size / tau of the maps (default 0.1)")
    s.add_argument("--integrator", default="rk4", help="rk4, euler, exp_euler, postnorm or prenorm (default rk4)")
    s.add_argument("--record-every", type=count, default=10, help="store states every this many steps (default 10)")
    add_device_arg(s, "float64 on any device (the starts are drawn on the cpu)")
    add_run_args(s, threads_default=1)
    s.set_defaults(func=_simulate, make_config=_simulate_config)


def _phase_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "phase",
        help="(t, beta) phase diagram of clustering for Q = K = V = I",
        description="Mean clustered fraction over (t, beta) with the equiangular curve overlaid.",
    )
    p.add_argument("--n", type=count, default=32, help="tokens (default 32)")
    p.add_argument("--d", type=count, default=8, help="dimension (default 8)")
    p.add_argument("--starts", type=count, default=256, help="random starts per beta (default 256)")
    p.add_argument("--beta-min", type=float, default=0.1, help="smallest beta (default 0.1)")
    p.add_argument("--beta-max", type=float, default=9.0, help="largest beta (default 9)")
    p.add_argument("--num-betas", type=count, default=90, help="number of beta values (default 90)")
    p.add_argument("--t-max", type=float, default=30.0, help="final time (default 30; at most 10^6 steps t_max/h)")
    p.add_argument("--h", type=float, default=0.1, help="step size (default 0.1)")
    p.add_argument("--integrator", default="euler", help="euler (default, as GLPR) or rk4")
    p.add_argument("--kind", default="SA", help="SA or USA (default SA)")
    p.add_argument(
        "--float32",
        action="store_true",
        help="integrate the sweep in float32 (about 2x faster; the 0.999 threshold is far above its resolution)",
    )
    p.add_argument(
        "--workers",
        type=count,
        default=0,
        help="run the beta chunks as Ray tasks on a local instance of this many CPUs (default 0: in process)",
    )
    p.add_argument("--address", default=None, help="run the beta chunks on this Ray cluster")
    add_device_arg(
        p,
        "float64 unless --float32; on CUDA every start runs to t_max (no retirement) and the fractions stay on the GPU",
    )
    add_run_args(p, threads_default=1)
    p.set_defaults(func=_phase, make_config=_phase_config)


def _model_parser(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser(
        "model",
        help="iterate a causal LM's decoder layers (SmolLM2 by default) for many passes and track E_first",
        description="Iterates a real (or random, same-shaped) decoder stack of any supported family from the "
        "first block's input: constant (one layer), periodic (all layers cycled) or random "
        "(redrawn per pass), with or without MLPs; prose, code and random-id prompts.",
    )
    m.add_argument(
        "--model",
        default="smollm2",
        help="smollm2 (default), a local HF folder or a hub id org/name (any family `attnlab scan` supports)",
    )
    m.add_argument("--passes", type=count, default=20, help="passes through the stack (>= 1, default 20)")
    m.add_argument(
        "--schedule", action="append", default=None, help="constant, periodic or random (repeatable; default periodic)"
    )
    m.add_argument("--layer", type=count, default=20, help="layer repeated by the constant schedule (default 20)")
    m.add_argument("--no-mlp", action="store_true", help="drop the MLPs (attention-only residual updates)")
    m.add_argument("--both-mlp", action="store_true", help="run both with and without MLPs")
    m.add_argument("--domains", default="prose,code,random", help="comma list of prompt domains (default all three)")
    m.add_argument("--prompts", type=count, default=3, help="prompts per domain (default 3)")
    m.add_argument("--seq-len", type=count, default=32, help="tokens per prompt T (2..2048, default 32)")
    m.add_argument("--feedback-final-norm", action="store_true", help="apply the final norm between passes")
    m.add_argument("--no-depth-view", action="store_true", help="skip the next-token depth view")
    m.add_argument("--cache-dir", type=Path, default=None, help="model cache folder for the shared loader")
    add_device_arg(m, "the real model runs in float32, its measures in float64, on any device")
    add_run_args(m, threads_default=1)
    m.set_defaults(func=_model, make_config=_model_config)


def _norm_config(args: argparse.Namespace) -> Any:
    from attnlab.consensus.config import NormConfig

    return NormConfig(
        model=args.model,
        passes=args.passes,
        mlp=args.mlp,
        domains=tuple(d.strip() for d in args.domains.split(",") if d.strip()),
        prompts=args.prompts,
        seq_len=args.seq_len,
        fall=args.fall,
        cache_dir=None if args.cache_dir is None else str(args.cache_dir),
        seed=args.seed,
    )


def _norm(args: argparse.Namespace) -> int:
    from attnlab.consensus.run import norm

    cfg = _norm_config(args)
    with threads(args.threads):
        result = norm(cfg, args.out, mode=run_mode(args))
    s = result.summary
    print(
        f"sphere idealisation: mean relative error {min(s['rel_error_mean']):.3g}..{max(s['rel_error_mean']):.3g} "
        f"over layers (worst layer {s['rel_error_max_layer']}); E_first fell {s['fall_real']:.2f} decades (real "
        f"norm) vs {s['fall_ideal']:.2f} (idealised); same conclusion: {s['same_conclusion']}"
    )
    print(f"run folder: {result.path}")
    return 0


def _norm_parser(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser(
        "norm",
        help="RMSNorm vs its idealisation as a projection onto a sphere, layer by layer (R13)",
        description="Fits y ~ c + s x/rms(x) per layer on half the prompts, measures the relative error on the "
        "other half, then iterates the stack with the real and the idealised norms; writes metrics.json, "
        "curves.npz, R13.png and report.html.",
    )
    m.add_argument("--model", default="smollm2", help="smollm2 (default) or a local HF causal-LM folder")
    m.add_argument("--passes", type=count, default=10, help="passes through the stack, >= 2 (default 10)")
    m.add_argument("--mlp", action="store_true", help="keep the MLPs on while iterating (default off)")
    m.add_argument("--domains", default="prose,code,random", help="comma list of prose, code, random")
    m.add_argument("--prompts", type=count, default=4, help="prompts per domain, >= 2 (default 4)")
    m.add_argument("--seq-len", type=count, default=32, help="tokens per prompt (default 32)")
    m.add_argument("--fall", type=float, default=0.5, help="decades of E_first fall that count as consensus")
    m.add_argument("--cache-dir", type=Path, default=None, help="model cache folder for the shared loader")
    add_run_args(m, threads_default=1)
    m.set_defaults(func=_norm, make_config=_norm_config)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `consensus simulate|phase|model`."""
    grp = subparsers.add_parser(
        "consensus",
        help="attention dynamics on the sphere: toy ODEs and iterated SmolLM2",
        description="Consensus study: token dynamics of attention (RST, GLPR, KPR).",
    )
    sub = grp.add_subparsers(dest="consensus_command", metavar="SUBCOMMAND")
    grp.set_defaults(func=lambda a: (grp.print_help(), 1)[1])
    _simulate_parser(sub)
    _phase_parser(sub)
    _model_parser(sub)
    _norm_parser(sub)
