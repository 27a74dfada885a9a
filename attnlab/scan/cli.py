"""`attnlab scan`: argparse <-> `ScanConfig`, nothing else."""

from __future__ import annotations

import argparse
from typing import Any

from attnlab.core.clitools import add_run_args, run_mode, threads
from attnlab.hf.cliargs import add_window_args, parse_head, window_kwargs

DEFAULT_DOMAINS = ["prose", "code", "random"]


def scan_config(args: argparse.Namespace) -> Any:
    from attnlab.hf.checkpoints import expand_series
    from attnlab.scan.config import ScanConfig

    models = list(args.model) if isinstance(args.model, list) else [m for m in [args.model] if m]
    revisions = list(args.revision) if isinstance(args.revision, list) else [r for r in [args.revision] if r]
    series = expand_series(models or ["smollm2"], revisions)
    kw = window_kwargs(args, DEFAULT_DOMAINS)
    kw.update(model=series[0][0] if series else (models or ["smollm2"])[0])
    kw.update(revision=series[0][1] if series else (revisions[0] if revisions else None))
    return ScanConfig(
        **kw,
        pattern_heads=tuple(parse_head(h, "--pattern-head") for h in args.pattern_head or []),
        checkpoints=series,
        sink_ratio=args.sink_ratio,
        sink_threshold=args.sink_threshold,
        stats=args.stats,
    )


def cmd_scan(args: argparse.Namespace) -> int:
    from attnlab.scan.run import scan

    config = scan_config(args)
    with threads(args.threads):
        result = scan(config, args.out, mode=run_mode(args))
    for r in result.summary.get("series", []):
        print(
            f"{r['checkpoint']} (step {r['step']}) {r['domain']}: sink {r['mean_sink_score']:.3f}, "
            f"max |x| {r['max_abs']:.1f}, value-norm ratio {r['value_norm_ratio_median']:.2f}"
        )
    if "series" in result.summary:
        print(f"run folder: {result.path}")
        return 0
    for d in result.summary["domains"]:
        print(
            f"{d['domain']}: perplexity {d['perplexity']:.2f}, Sink_1^0.3 {d['sink_1_eps_percent']:.1f}%, "
            f"heads with sink ≥ 0.5: {d['heads_above_0.5_percent']:.1f}%"
            + (f", learned-sink mass {d['mean_learned_sink_mass']:.3f}" if "mean_learned_sink_mass" in d else "")
        )
    print(f"head classes: {result.summary['class_counts']}")
    for p in result.summary.get("sink_procedure", []):
        print(
            f"{p['domain']}: authors' sink heads {p['authors_sink_heads']} (beyond token 0: "
            f"{p['authors_sink_heads_beyond0']}), key-0 sink heads {p['key0_sink_heads']}, Jaccard {p['jaccard']:.2f}; "
            f"a sink beyond token 0 in {p['windows_with_beyond0_sink']:.0%} of windows (layers "
            f"{p['beyond0_sink_layers']}: {p['beyond0_sunk_tokens'] or 'none'})"
        )
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
    add_window_args(p, DEFAULT_DOMAINS, samples=8, batch_size=1, series=True)
    p.add_argument(
        "--pattern-head",
        action="append",
        default=None,
        metavar="L.H",
        help="also keep the full attention pattern of this head (repeatable)",
    )
    p.add_argument(
        "--sink-ratio",
        type=float,
        default=10.0,
        help="the authors' sink-head procedure: candidate sink tokens have a residual norm above this multiple of "
        "the window's median (default 10)",
    )
    p.add_argument(
        "--sink-threshold",
        type=float,
        default=0.3,
        help="... and a head has a sink on a candidate when its mean attention score on it (over the queries at "
        "or after it) is at least this (default 0.3)",
    )
    p.add_argument(
        "--stats",
        choices=("fast", "full", "chunked"),
        default="fast",
        help="fast (default): statistics from the fused kernel's log-sum-exp, about a plain forward's cost, row "
        "entropy not computed (NaN); full: also the row entropy and every column mean (two more fused calls); "
        "chunked: the exact eager chunked attention of earlier versions",
    )
    add_run_args(p, threads_default=1)
    p.set_defaults(func=cmd_scan, make_config=scan_config)
