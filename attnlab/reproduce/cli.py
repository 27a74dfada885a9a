"""`attnlab reproduce`: argparse <-> `ReproduceConfig`, nothing else."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from attnlab.clitools import add_device_arg, add_run_args, run_mode, threads


def reproduce_config(args: argparse.Namespace) -> Any:
    from attnlab.reproduce.config import ReproduceConfig

    targets = tuple(t.strip() for t in (args.targets or "").split(",") if t.strip())
    return ReproduceConfig(
        studies=tuple(args.studies or ()), profile=args.profile, seed=args.seed, device=args.device, targets=targets
    )


def cmd_reproduce(args: argparse.Namespace) -> int:
    from attnlab.reproduce.report import check_docs_folder, export_docs
    from attnlab.reproduce.run import reproduce

    config = reproduce_config(args)
    if args.docs is not None:
        check_docs_folder(args.docs)
    with threads(args.threads):
        result = reproduce(config, args.out, mode=run_mode(args))
    for study, c in result.summary.items():
        print(f"{study}: {c['met']} met, {c['missed']} missed, {c['not run']} not run")
    if args.docs is not None:
        print(f"table: {export_docs(result.path, args.docs)}")
    print(f"run folder: {result.path}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the top-level `reproduce` command."""
    from attnlab.reproduce.config import PROFILES, STUDIES

    p = subparsers.add_parser(
        "reproduce",
        help="run the specs' reproduction targets and compute each verdict (met / missed / not run)",
        description="Runs the study runs behind each pre-registered target of the specs, evaluates every "
        "threshold in code and writes reproduction.json, reproduction.md and report.html (one row per target). "
        "Profiles: tiny (about a minute, machinery only), quick (about 15 minutes on 2 free cores), "
        "full (paper-scale settings, hours).",
    )
    p.add_argument("studies", nargs="*", metavar="STUDY",
                   help=f"studies to run (default all): {', '.join(STUDIES)}")  # fmt: skip
    p.add_argument("--profile", default="quick", help=f"run sizes: {', '.join(PROFILES)} (default quick)")
    p.add_argument("--docs", type=Path, default=None, metavar="DIR",
                   help="also write DIR/reproduction.md and copy the figures to DIR/figures/<study>/")  # fmt: skip
    p.add_argument("--targets", default=None, metavar="R1,R2",
                   help="only these target ids of the chosen studies (default all), e.g. R9,R10,R11")  # fmt: skip
    add_device_arg(
        p, "passed on to the study runs that compute on a GPU (bb training, consensus phase); the others run on the cpu"
    )
    add_run_args(p, threads_default=1)
    p.set_defaults(func=cmd_reproduce, make_config=reproduce_config)
