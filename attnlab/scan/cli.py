"""`attnlab scan`: argparse <-> `ScanConfig`, nothing else."""

from __future__ import annotations

import argparse
from typing import Any

from attnlab.clitools import add_run_args, run_mode, threads
from attnlab.hf.settings import add_window_args, parse_head, window_kwargs

DEFAULT_DOMAINS = ["prose", "code", "random"]


def scan_config(args: argparse.Namespace) -> Any:
    from attnlab.scan.config import ScanConfig

    return ScanConfig(
        **window_kwargs(args, DEFAULT_DOMAINS),
        pattern_heads=tuple(parse_head(h, "--pattern-head") for h in args.pattern_head or []),
    )


def cmd_scan(args: argparse.Namespace) -> int:
    from attnlab.scan.run import scan

    config = scan_config(args)
    with threads(args.threads):
        result = scan(config, args.out, mode=run_mode(args))
    for d in result.summary["domains"]:
        print(
            f"{d['domain']}: perplexity {d['perplexity']:.2f}, Sink_1^0.3 {d['sink_1_eps_percent']:.1f}%, "
            f"heads with sink ≥ 0.5: {d['heads_above_0.5_percent']:.1f}%"
        )
    print(f"head classes: {result.summary['class_counts']}")
    print(f"run folder: {result.path}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the top-level `scan` command."""
    p = subparsers.add_parser(
        "scan",
        help="scan a real causal LM for attention sinks and active-dormant heads",
        description="Streams text windows of each domain through the model, reducing every "
        "layer's attention on the fly, and writes heads.csv, layers.csv, "
        "samples.jsonl, classes.csv, figures and report.html.",
    )
    add_window_args(p, DEFAULT_DOMAINS, samples=8, batch_size=1)
    p.add_argument(
        "--pattern-head",
        action="append",
        default=None,
        metavar="L.H",
        help="also keep the full attention pattern of this head (repeatable)",
    )
    add_run_args(p, threads_default=1)
    p.set_defaults(func=cmd_scan, make_config=scan_config)
