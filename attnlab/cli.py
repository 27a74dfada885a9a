"""The `attnlab` command line: one command (or group) per study, plus `demo` and `rerun`.

Each study package `attnlab/<name>/` provides `cli.py` with `register(subparsers)` (its parsers set
`func(args) -> int`), and optionally `demo.py` with `run_demo(out, seed) -> Report`, its part of `attnlab demo`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from pathlib import Path
from types import ModuleType

from attnlab.core.registry import commands
from attnlab.errors import AttnlabError, InputError

# The order of `attnlab --help`: the one table of rooms in attnlab.core.registry.
STUDY_CLIS = commands()


def _import_optional(name: str, broken: dict[str, str]) -> ModuleType | None:
    """Import `name`; a module absent from this checkout gives None, any other failure is noted in `broken`."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            return None
        broken[name] = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - one broken study must not take the CLI down
        broken[name] = f"{type(exc).__name__}: {exc}"
    return None


def build_parser(broken: dict[str, str] | None = None) -> argparse.ArgumentParser:
    """The full parser; studies that fail to import are listed in `broken` instead."""
    broken = {} if broken is None else broken
    parser = argparse.ArgumentParser(
        prog="attnlab",
        description="attnlab: measure and explain attention on toy and real transformers. "
        "Every command writes a run folder (config.json, metrics, figures, report.html) and prints it.",
    )
    parser.add_argument(
        "--debug", action="store_true", help="show the full traceback of a failure (before its one-line message)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in STUDY_CLIS:
        mod = _import_optional(f"attnlab.{name}.cli", broken)
        if mod is not None:
            mod.register(sub)
    _register_demo(sub)
    _register_rerun(sub)
    return parser


def _register_demo(sub: argparse._SubParsersAction) -> None:
    from attnlab.demo import DEMOS

    demo = sub.add_parser(
        "demo",
        help="run every study's short demo on embedded defaults and write one report",
        description="Runs each study's demo on embedded defaults (a few minutes on 2 cores) "
        "and writes one combined report.html that links the report of every run.",
    )
    demo.add_argument("--out", type=Path, default=Path("runs/demo"), help="run folder (default runs/demo)")
    demo.add_argument("--seed", type=int, default=None, help="random seed (default 0; a resume keeps its own)")
    demo.add_argument(
        "--only",
        action="append",
        default=None,
        metavar="STUDY",
        help=f"run only these studies (repeatable; one of {', '.join(DEMOS)})",
    )
    demo.add_argument("--overwrite", action="store_true", help="replace an earlier demo in --out")
    demo.add_argument(
        "--resume",
        action="store_true",
        help="continue a demo that stopped: keep the study parts it finished, run the others",
    )
    demo.set_defaults(func=run_demo)


def _register_rerun(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rerun",
        help="run a run folder's command again from its config.json into a new folder",
        description="Reads RUN_DIR/manifest.json (the command) and RUN_DIR/config.json (the resolved "
        "config, seed included) and runs the same command into a new folder.",
    )
    p.add_argument("run_dir", help="a run folder written by an attnlab command")  # str: '' is not .
    p.add_argument("--out", type=Path, default=None, help="new run folder (default runs/<command>-<time>)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default torch's choice)")
    p.set_defaults(func=cmd_rerun)


def cmd_rerun(args: argparse.Namespace) -> int:
    """`attnlab rerun RUN_DIR`: the folder's command and config are read, and `--out` checked, before the
    command's run module (torch ...) is imported, so a bad folder is refused in a fraction of a second."""
    from attnlab.core.clitools import threads
    from attnlab.core.registry import resolve
    from attnlab.runs import RunDir, check_out_folder
    from attnlab.runs.configs import config_from_dict

    if not args.run_dir.strip():
        raise InputError("run_dir is an empty path; name a run folder written by an attnlab command")
    old = RunDir(args.run_dir)
    command = old.read_manifest().get("command")
    if not command or not isinstance(command, str):
        raise InputError(f"{args.run_dir}/manifest.json names no command; it was not written by this attnlab")
    saved = old.read_config()
    if args.out is not None:
        if args.out.is_dir() and any(args.out.iterdir()):
            raise InputError(f"--out {args.out} is not empty; rerun writes a new run folder: choose another --out")
        check_out_folder(args.out, "new", command)
    config_cls, run = resolve(command)
    config: object = config_from_dict(config_cls, saved)
    with threads(args.threads):
        result = run(config, args.out)
    print(f"run folder: {result.path}")
    return 0


def run_demo(args: argparse.Namespace) -> int:
    """`attnlab demo`: argparse -> `DemoConfig` (a `--resume` without --seed/--only: the saved one);
    `attnlab.demo.run_demo` does the work."""
    from attnlab.core.clitools import run_mode
    from attnlab.demo import DemoConfig
    from attnlab.demo import run_demo as demo

    mode = run_mode(args)
    typed = args.seed is not None or args.only is not None
    config = DemoConfig(seed=args.seed or 0, only=tuple(args.only or ())) if typed or mode != "resume" else None
    result = demo(config, args.out, mode=mode, echo=lambda line: print(line, flush=True))
    if result.summary.get("nothing_to_do"):
        print(result.summary["nothing_to_do"])
        return 0
    print(f"report: {result.path / 'report.html'}")
    print(f"run folder: {result.path}")
    return 0


# Library failures the CLI turns into one line (matched by class name along the MRO, so that reading the
# name needs no import of torch or safetensors): class name -> (what the line says, exit code).
LIBRARY_FAILURES = {
    "MemoryError": ("out of memory", 1),
    "OutOfMemoryError": ("out of memory", 1),
    "SafetensorError": ("cannot read or write a safetensors file", 1),
    "LinAlgError": ("linear algebra failed", 2),
    "_LinAlgError": ("linear algebra failed", 2),
}
LONG_PATH = 120  # longer paths are shortened in a message (ENAMETOOLONG names a 4,096-character one)


def _short(path: object) -> str:
    text = str(path)
    if len(text) <= LONG_PATH:
        return text
    return f"{text[:60]}...{text[-40:]} ({len(text)} characters)"


def _option_of(args: argparse.Namespace, argv: list[str], filename: object) -> str | None:
    """The option typed in `argv` (`--out`, `--docs` ...) whose path is `filename`, if any."""
    typed = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    for key, value in vars(args).items():
        option = "--" + key.replace("_", "-")
        if isinstance(value, Path) and str(value) == str(filename) and option in typed:
            return option
    return None


def _os_failure(exc: OSError, args: argparse.Namespace, argv: list[str]) -> str:
    """'no space left on device writing PATH', '--out PATH: file name too long', 'PATH: permission denied' ..."""
    from attnlab.runs import WriteError

    reason = (exc.strerror or str(exc) or type(exc).__name__).strip()
    reason = reason[:1].lower() + reason[1:]
    if exc.filename is None:
        return f"{reason} ({type(exc).__name__})"
    if isinstance(exc, WriteError):
        return f"{reason} writing {_short(exc.filename)}"
    option = _option_of(args, argv, exc.filename)
    return f"{option + ' ' if option else ''}{_short(exc.filename)}: {reason}"


def failure_message(exc: BaseException, args: argparse.Namespace, argv: list[str]) -> tuple[str, int] | None:
    """One line and an exit code for a library failure that reached the CLI, or None for anything else; the
    exception's notes follow (`open_run` adds where a stopped run is kept and how to continue it)."""
    notes = "".join(f"; {note}" for note in getattr(exc, "__notes__", ()))
    if isinstance(exc, OSError):
        return _os_failure(exc, args, argv) + notes, 1
    for cls in type(exc).__mro__:
        if cls.__name__ in LIBRARY_FAILURES:
            what, code = LIBRARY_FAILURES[cls.__name__]
            detail = " ".join(str(exc).split())
            return (f"{what} ({type(exc).__name__}: {detail})" if detail else what) + notes, code
    return None


def _close_progress_bars() -> None:
    """Finish the progress bars a failed command left open, so that its error line starts a line of its own."""
    tqdm = getattr(sys.modules.get("tqdm"), "tqdm", None)
    for bar in list(getattr(tqdm, "_instances", ())):
        with contextlib.suppress(Exception):
            bar.close()


def _report(message: str, after_progress: bool, debug: bool) -> None:
    if debug:
        import traceback

        traceback.print_exc(file=sys.stderr)
    line = " ".join(message.splitlines())
    print(f"\nattnlab: error: {line}" if after_progress else f"attnlab: error: {line}", file=sys.stderr)


def validate_first(args: argparse.Namespace) -> None:
    """Build the command's config once before its function runs, so that a bad choice or range is refused in a
    fraction of a second: the command functions import their run modules (torch, transformers) before building
    the config themselves. Configs import no torch, and building one does no work. A `--resume` reads the saved
    config instead, so its flags are left to the command, as are those of a parser with `prevalidate=False`."""
    from attnlab.core.clitools import check_threads

    if isinstance(getattr(args, "threads", None), int):
        check_threads(args.threads)
    make_config = getattr(args, "make_config", None)
    if make_config is not None and getattr(args, "prevalidate", True) and not getattr(args, "resume", False):
        make_config(args)


def main(argv: list[str] | None = None) -> int:
    from attnlab.core.clitools import process_settings

    broken: dict[str, str] = {}
    parser = build_parser(broken)
    for name, why in broken.items():
        print(f"attnlab: warning: {name} is unavailable ({why})", file=sys.stderr)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    with process_settings():
        try:
            validate_first(args)
            return int(args.func(args) or 0)
        except AttnlabError as exc:
            _report(str(exc), getattr(exc, "after_progress", False), args.debug)
            return exc.exit_code
        except KeyboardInterrupt:
            print("\nattnlab: interrupted", file=sys.stderr)
            return 130
        except Exception as exc:
            failure = failure_message(exc, args, argv)
            if failure is None:
                raise
            _close_progress_bars()
            _report(failure[0], False, args.debug)
            return failure[1]


if __name__ == "__main__":
    sys.exit(main())
