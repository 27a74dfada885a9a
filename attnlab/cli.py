"""The `attnlab` command line: one subcommand (or group) per study.

Each study package may provide `attnlab/<study>/cli.py` with
  - `register(subparsers)`: adds its subcommands; each parser sets `func(args) -> int`;
  - `run_demo(out: Path, seed: int) -> Report` (optional): the study's part of `attnlab demo`.
Studies are discovered in `STUDIES` order, so adding one needs no edit here beyond the list.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path
from types import ModuleType

from attnlab.errors import AttnlabError

# The order is the order of `attnlab --help` and of the demo report.
STUDIES = ["extreme", "real", "consensus", "paths"]


_BROKEN: dict[str, str] = {}


def _study_modules() -> list[ModuleType]:
    """Import each study's CLI module; a study that fails to import is reported, not fatal to the others."""
    mods = []
    for name in STUDIES:
        try:
            mods.append(importlib.import_module(f"attnlab.{name}.cli"))
        except ModuleNotFoundError as exc:  # a study that is not in this checkout
            if exc.name not in (f"attnlab.{name}", f"attnlab.{name}.cli"):
                _BROKEN[name] = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - keep the other studies usable
            _BROKEN[name] = f"{type(exc).__name__}: {exc}"
    return mods


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnlab",
        description="attnlab: measure and explain attention on toy and real transformers. "
                    "Every command writes a run folder (config.json, metrics, figures, report.html) and prints it.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in _study_modules():
        try:
            mod.register(sub)
        except Exception as exc:  # noqa: BLE001 - one broken study must not take the CLI down
            _BROKEN[mod.__name__.split(".")[1]] = f"{type(exc).__name__}: {exc}"
    demo = sub.add_parser("demo", help="run every study's short demo on embedded defaults and write one report",
                          description="Runs each study's demo on embedded defaults (a few minutes on 2 cores) "
                                      "and writes one combined report.html.")
    demo.add_argument("--out", type=Path, default=Path("runs/demo"), help="run folder (default runs/demo)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo.add_argument("--only", action="append", default=None, metavar="STUDY",
                      help=f"run only these studies (repeatable; one of {', '.join(STUDIES)})")
    demo.set_defaults(func=run_demo)
    return parser


def run_demo(args: argparse.Namespace) -> int:
    import torch

    from attnlab.report import Report

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    report = Report("attnlab demo")
    report.paragraph("Each section below is one study's demo, run on embedded defaults; its own run folder "
                     "(with config.json, metrics and figures) is named in the section.")
    timings = []
    for mod in _study_modules():
        name = mod.__name__.split(".")[1]
        if args.only and name not in args.only:
            continue
        if not hasattr(mod, "run_demo"):
            continue
        t0 = time.perf_counter()
        print(f"== demo: {name}", flush=True)
        threads = torch.get_num_threads()
        section = mod.run_demo(out / name, args.seed)
        torch.set_num_threads(threads)       # a study may lower it for itself
        timings.append({"study": name, "seconds": round(time.perf_counter() - t0, 1), "folder": str(out / name)})
        report.extend(section)
        report.write(out / "report.html")  # keep a partial report if a later study fails
    report.table(timings, caption="Demo timings")
    path = report.write(out / "report.html")
    print(f"report: {path}")
    print(f"run folder: {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("MPLBACKEND", "Agg")
    parser = build_parser()
    for name, why in _BROKEN.items():
        print(f"attnlab: warning: study {name!r} is unavailable ({why})", file=sys.stderr)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except AttnlabError as exc:
        print(f"attnlab: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("attnlab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
