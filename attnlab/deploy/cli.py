"""`attnlab deploy quantize|window`: argparse <-> `QuantizeConfig` / `SlidingWindowConfig`, nothing else."""

from __future__ import annotations

import argparse
from typing import Any

from attnlab.core.clitools import add_run_args, run_mode, threads
from attnlab.hf.cliargs import add_window_args, window_kwargs

DEFAULT_DOMAINS = ["prose", "code"]


def quantize_config(args: argparse.Namespace) -> Any:
    from attnlab.deploy.config import QUANT_POLICIES, QuantizeConfig

    return QuantizeConfig(
        **window_kwargs(args, DEFAULT_DOMAINS),
        policies=tuple(dict.fromkeys(args.policy)) if args.policy else QUANT_POLICIES,
        sites=tuple(dict.fromkeys(args.site)) if args.site else ("linear", "residual"),
        bits=args.bits,
        outlier_ratio=args.outlier_ratio,
        max_outliers=args.max_outliers,
    )


def window_config(args: argparse.Namespace) -> Any:
    from attnlab.deploy.config import SlidingWindowConfig

    return SlidingWindowConfig(
        **window_kwargs(args, DEFAULT_DOMAINS),
        windows=tuple(dict.fromkeys(args.window)) if args.window else (256,),
        sink_tokens=args.sink_tokens,
    )


def cmd_quantize(args: argparse.Namespace) -> int:
    from attnlab.deploy.run import quantize

    config = quantize_config(args)
    with threads(args.threads):
        result = quantize(config, args.out, mode=run_mode(args))
    for r in result.tables["perplexity"].to_dict("records"):
        print(f"{r['domain']:>7} {r['label']:>28}  perplexity {r['perplexity']:.4g}  (NLL {r['nll']:.4f})")
    print(f"run folder: {result.path}")
    return 0


def cmd_window(args: argparse.Namespace) -> int:
    from attnlab.deploy.run import window

    config = window_config(args)
    with threads(args.threads):
        result = window(config, args.out, mode=run_mode(args))
    for r in result.tables["perplexity"].to_dict("records"):
        print(f"{r['domain']:>7} {r['policy']:>18}  perplexity {r['perplexity']:.4g}  (NLL {r['nll']:.4f})")
    print(f"run folder: {result.path}")
    return 0


def _tokens_default(p: argparse.ArgumentParser, tokens: int) -> None:
    """This command's default --tokens (the shared window options default to 128), in its help too."""
    p.set_defaults(tokens=tokens)
    for action in p._actions:
        if "--tokens" in action.option_strings:
            action.help = f"sequence length T (default {tokens})"


def _quantize_parser(sub: argparse._SubParsersAction) -> None:
    q = sub.add_parser(
        "quantize",
        help="perplexity under fake int8 activation quantisation, with and without the outlier channels",
        description="Fake per-tensor int8 quantisation of the activations (Linear inputs and/or the residual "
        "stream entering each block): none, naive, outliers excluded from the scale (kept exact), outliers clipped.",
    )
    add_window_args(q, DEFAULT_DOMAINS, samples=8, batch_size=1)
    _tokens_default(q, 512)
    q.add_argument(
        "--policy",
        action="append",
        default=None,
        choices=["none", "naive", "exclude", "clip"],
        help="repeatable (default all four)",
    )
    q.add_argument(
        "--site",
        action="append",
        default=None,
        choices=["linear", "residual"],
        help="where activations are quantised, repeatable (default both)",
    )
    q.add_argument("--bits", type=int, default=8, help="quantisation bits (default 8)")
    q.add_argument(
        "--outlier-ratio",
        type=float,
        default=10.0,
        help="outlier channel: peak > RATIO x the median channel peak (default 10)",
    )
    q.add_argument("--max-outliers", type=int, default=4, help="at most this many outlier channels per tensor")
    add_run_args(q, threads_default=1)
    q.set_defaults(func=cmd_quantize, make_config=quantize_config)


def _window_parser(sub: argparse._SubParsersAction) -> None:
    w = sub.add_parser(
        "window",
        help="perplexity under a sliding-window KV policy, with and without keeping the sink token",
        description="Each query attends to the last W keys only (4D attention mask), with and without the "
        "first token(s) kept as attention sinks; full causal attention is the baseline. Position ids unchanged.",
    )
    add_window_args(w, DEFAULT_DOMAINS, samples=8, batch_size=1)
    _tokens_default(w, 1024)
    w.add_argument(
        "--window",
        action="append",
        type=int,
        default=None,
        metavar="W",
        help="keys each query sees (itself included), repeatable (default 256)",
    )
    w.add_argument("--sink-tokens", type=int, default=1, help="first tokens kept by sink+window (default 1)")
    add_run_args(w, threads_default=1)
    w.set_defaults(func=cmd_window, make_config=window_config)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `deploy quantize|window`."""
    grp = subparsers.add_parser(
        "deploy",
        help="why extreme tokens matter in practice: int8 activations and sliding-window KV caches",
        description="Deployment consequences of massive activations and attention sinks (spec R23).",
    )
    sub = grp.add_subparsers(dest="deploy_command", metavar="SUBCOMMAND")
    grp.set_defaults(func=lambda a: (grp.print_help(), 1)[1])
    _quantize_parser(sub)
    _window_parser(sub)
