"""`attnlab reproduce`: argparse <-> `ReproduceConfig`, nothing else."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from attnlab.core.clitools import add_device_arg, add_run_args, run_mode, threads


def reproduce_config(args: argparse.Namespace) -> Any:
    from attnlab.reproduce.config import ReproduceConfig

    targets = tuple(t.strip() for t in (args.targets or "").split(",") if t.strip())
    return ReproduceConfig(
        studies=tuple(args.studies or ()), profile=args.profile, seed=args.seed, seeds=args.seeds,
        device=args.device, targets=targets,
        docs=None if args.docs is None else str(args.docs), workers=args.workers, address=args.address,
    )  # fmt: skip


def cmd_reproduce(args: argparse.Namespace) -> int:
    from attnlab.errors import InputError
    from attnlab.reproduce.run import reproduce

    if args.table_only:
        return table_only(args)
    if args.rejudge is not None:
        return rejudge_only(args)
    if args.merge:
        raise InputError("--merge goes with --rejudge JSON (the table whose rows the merged run replaces)")
    config = reproduce_config(args)
    with threads(args.threads):
        result = reproduce(config, args.out, mode=run_mode(args))
    print_counts(result.summary)
    if config.docs is not None:
        print(f"table: {Path(config.docs) / 'reproduction.md'}")
    print(f"run folder: {result.path}")
    return 0


def table_only(args: argparse.Namespace) -> int:
    """`--table-only`: the table of the run in --out from its ended experiments (nothing runs)."""
    from attnlab.errors import InputError
    from attnlab.reproduce.run import table_so_far

    if args.out is None:
        raise InputError("--table-only needs --out: the reproduce run folder to read")
    record = table_so_far(args.out, args.docs)
    print_counts(record["counts"])
    print(f"not ended yet: {', '.join(record['pending']) or 'none'}")
    if args.docs is not None:
        print(f"table: {Path(args.docs) / 'reproduction.md'}")
    return 0


def print_counts(counts: dict) -> None:
    """One line per study: its claims, checks and timings by verdict (`report.count_text`)."""
    from attnlab.reproduce.report import count_text

    for study, c in counts.items():
        print(f"{study}: {count_text(c)}")


def rejudge_only(args: argparse.Namespace) -> int:
    """`--rejudge FILE`: judge a saved reproduction.json again by the current targets' code (nothing runs); with
    --docs, export the table there (the figures already under --docs are linked)."""
    from attnlab.reproduce.rejudge import rejudge_file

    merge = tuple(Path(m) for m in args.merge or ())
    record = rejudge_file(Path(args.rejudge), None if args.docs is None else Path(args.docs), merge)
    print_counts(record["counts"])
    if args.docs is not None:
        print(f"table: {Path(args.docs) / 'reproduction.md'}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the top-level `reproduce` command."""
    from attnlab.reproduce.config import PROFILES, STUDIES

    p = subparsers.add_parser(
        "reproduce",
        help="run the specs' reproduction targets and compute each verdict (met / missed / not run)",
        description="Runs the study runs behind each pre-registered target of the specs, evaluates every "
        "threshold in code and writes reproduction.json, reproduction.md and report.html (one row per target). "
        "Profiles: tiny (about a minute, machinery only), quick (about 5 minutes with --workers 2 on 2 free cores), "
        "full (paper-scale settings, hours).",
    )
    p.add_argument("studies", nargs="*", metavar="STUDY",
                   help=f"studies to run (default all): {', '.join(STUDIES)}")  # fmt: skip
    p.add_argument("--profile", default="quick", help=f"run sizes: {', '.join(PROFILES)} (default quick)")
    p.add_argument("--docs", type=Path, default=None, metavar="DIR",
                   help="also write DIR/reproduction.md and copy the figures to DIR/figures/<study>/")  # fmt: skip
    p.add_argument("--targets", default=None, metavar="R1,R2",
                   help="only these target ids of the chosen studies (default all), e.g. R9,R10,R11")  # fmt: skip
    p.add_argument("--seeds", type=int, default=1, metavar="N",
                   help="independent seeds of the experiments behind the claim rows (default 1): seeds --seed .. "
                   "--seed + N - 1, each claim number judged by its 95%% t-interval over them; a rerun of one seed S "
                   "is --seed S (with --targets)")  # fmt: skip
    p.add_argument("--rejudge", default=None, metavar="JSON",
                   help="judge a saved reproduction.json again by the current targets' code (nothing runs); with "
                   "--docs, write the table there")  # fmt: skip
    p.add_argument("--merge", action="append", default=None, metavar="RUN",
                   help="with --rejudge: the rows of this finished `--targets` run (its folder or "
                   "reproduction.json) replace the table's, and the header names them (a timing rerun on a quiet "
                   "machine); repeatable")  # fmt: skip
    add_device_arg(
        p, "passed on to the study runs that compute on a GPU (bb training, consensus phase); the others run on the cpu"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="run the study runs as Ray tasks on a local instance of N CPUs (default 1: in this process)",
    )
    p.add_argument("--address", default=None, help="run the study runs as Ray tasks on this Ray cluster (host:port)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="finish the interrupted reproduce run in --out: its finished study runs are kept",
    )
    p.add_argument(
        "--table-only",
        action="store_true",
        help="write the table of the reproduce run in --out from the experiments that have ended so far, while it "
        "runs or after a kill (nothing runs; the run folder is not written; with --docs, exported there)",
    )
    add_run_args(p, threads_default=1)
    p.set_defaults(func=cmd_reproduce, make_config=reproduce_config)
