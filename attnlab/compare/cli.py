"""`attnlab compare RUN_DIR ...` and `attnlab compare --index FOLDER`: argparse <-> config, nothing else."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from attnlab.core.clitools import run_mode
from attnlab.errors import InputError


def make_config(args: argparse.Namespace) -> Any:
    from attnlab.compare.config import CompareConfig

    return CompareConfig(run_dirs=tuple(str(d) for d in args.run_dirs), title=args.title)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="put run folders of any commands side by side, or index a folder of runs",
        description="With RUN_DIRs: writes a comparison run folder (report.html: one table per command with "
        "the config fields that differ and the final metrics, and the runs' metric curves overlaid). With "
        "--index FOLDER: writes FOLDER/index.html listing every run folder below FOLDER with links.",
    )
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR", help="run folders to compare (two or more)")
    p.add_argument("--index", type=Path, default=None, metavar="FOLDER", help="write FOLDER/index.html instead")
    p.add_argument("--title", default="Run comparison", help="page title")
    p.add_argument("--out", type=Path, default=None, help="comparison folder (default runs/compare-<time>)")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier comparison in --out")
    p.set_defaults(func=cmd_compare, make_config=make_config, prevalidate=False)  # --index takes no config


def cmd_compare(args: argparse.Namespace) -> int:
    from attnlab.compare.run import compare, write_index

    if args.index is not None:
        if args.run_dirs or args.out is not None:
            raise InputError("--index FOLDER takes no RUN_DIR and no --out (the page is FOLDER/index.html)")
        print(f"index: {write_index(args.index)}")
        return 0
    result = compare(make_config(args), args.out, mode=run_mode(args))
    print(f"run folder: {result.path}")
    return 0
