"""`attnlab ablate`: argparse <-> `AblateConfig`, nothing else."""

from __future__ import annotations

import argparse
from typing import Any

from attnlab.core.clitools import add_run_args, count, run_mode, threads
from attnlab.hf.cliargs import add_window_args, parse_dim, parse_head, window_kwargs

DEFAULT_DOMAINS = ["prose", "code"]


def ablate_config(args: argparse.Namespace) -> Any:
    from attnlab.ablate.config import AblateConfig

    return AblateConfig(
        **window_kwargs(args, DEFAULT_DOMAINS),
        heads=tuple(parse_head(h) for h in args.head or []),
        sink_heads=tuple(parse_head(h, "--sink-head") for h in args.sink_head or []),
        mlps=tuple(args.mlp or []),
        dims=tuple(parse_dim(d) for d in args.dim or []),
        sweep_layers=tuple(args.sweep_layer or []),
        together=args.together,
        sink_from=str(args.sink_from) if args.sink_from else None,
    )


def cmd_ablate(args: argparse.Namespace) -> int:
    from attnlab.ablate.run import ablate

    config = ablate_config(args)
    with threads(args.threads):
        result = ablate(config, args.out, mode=run_mode(args))
    for r in result.tables["ablation"].to_dict("records"):
        sink = "" if r["sink_score"] == "" else f"{float(r['sink_score']):.3f}"
        print(f"{r['domain']:>7} {r['condition']:>14}  sink {sink:>6}  ΔNLL {r['dnll_mean']:+.4f} ± {r['dnll_se']:.4f}")
    print(f"run folder: {result.path}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the top-level `ablate` command."""
    a = subparsers.add_parser(
        "ablate",
        help="zero heads / MLPs / residual coordinates and report the loss change",
        description="Runs clean and ablated forwards on the same windows and reports the "
        "change in next-token loss per domain (heads are zeroed before o_proj).",
    )
    add_window_args(a, DEFAULT_DOMAINS, samples=8, batch_size=4)
    a.add_argument("--head", action="append", default=None, metavar="L.H", help="zero head H of layer L (repeatable)")
    a.add_argument(
        "--sink-head",
        action="append",
        default=None,
        metavar="L.H",
        help="move all of head L.H's attention onto key 0 (repeatable)",
    )
    a.add_argument("--mlp", action="append", type=count, default=None, metavar="L", help="zero the MLP of layer L")
    a.add_argument(
        "--dim",
        action="append",
        default=None,
        metavar="L:POS:DIM",
        help="zero residual coordinate DIM at position POS (or *) after block L (repeatable)",
    )
    a.add_argument(
        "--sweep-layer",
        action="append",
        type=count,
        default=None,
        metavar="L",
        help="zero every head of layer L, one at a time (repeatable)",
    )
    a.add_argument("--together", action="store_true", help="also run all listed interventions at once")
    a.add_argument(
        "--sink-from",
        default=None,
        metavar="SCAN_RUN",
        help="reuse the sink scores of a scan run on the same windows instead of tracing the baseline",
    )
    add_run_args(a, threads_default=1)
    a.set_defaults(func=cmd_ablate, make_config=ablate_config)
