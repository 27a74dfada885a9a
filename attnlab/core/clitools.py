"""Helpers shared by the study CLIs, and the only place that changes process-wide state.

`threads(n)` sets torch's thread count for the duration of a command and restores it; `process_settings()` sets
the environment a command runs in (matplotlib backend, tokenizers) and turns SIGTERM into KeyboardInterrupt so a
killed run checkpoints as after Ctrl-C; `add_run_args` adds the `--out/--resume/--overwrite/--seed/--threads`
options every command shares and `run_mode(args)` reads them back.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

from attnlab.errors import InputError


def check_threads(n: int | None) -> None:
    """Refuse a negative `--threads` in one line (before torch is imported: `attnlab`'s main checks it first)."""
    if n is not None and n < 0:
        raise InputError(f"--threads must be >= 1 (or 0 for torch's default), got {n}")


@contextlib.contextmanager
def threads(n: int | None) -> Iterator[None]:
    """Run the body with `n` torch threads (None or 0: leave torch's choice), then restore the old count."""
    check_threads(n)
    import torch

    if n is None or n == 0:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def process_settings() -> Iterator[None]:
    """The process-wide settings of one CLI call, restored afterwards: SIGTERM acts as Ctrl-C (so a killed run
    checkpoints), matplotlib draws off-screen, tokenizers do not fork threads."""
    defaults = {
        "MPLBACKEND": "Agg",
        "TOKENIZERS_PARALLELISM": "false",
        # HF_HUB_OFFLINE is the user's to set: local folders are read with local_files_only=True, hub ids
        # (org/name) go through the Hugging Face cache, which honours HF_HUB_OFFLINE=1 and is never forced offline
    }
    saved_env = {k: os.environ.get(k) for k in defaults}
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    try:
        old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:  # not the main thread (e.g. called from a worker): leave signals alone
        old_term = None
    try:
        yield
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def loopback_ray(local: bool) -> Iterator[None]:
    """While a local Ray instance is started, keep it on 127.0.0.1: Ray's single-machine mode (the variable must
    be set before `ray` is imported; with an --address the cluster's own addresses are used)."""
    key = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
    old = os.environ.get(key)
    if local:
        os.environ[key] = "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def count(text: str) -> int | float:
    """argparse type for counts that may be written like 1e8: an int when the number is whole, else the float
    itself, so the config's range check names the field (`steps must be an integer in [1, N], got 1.5`)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    return int(value) if value.is_integer() and abs(value) < 2**63 else value  # 1e300 stays 1e+300 in messages


def add_run_args(
    p: argparse.ArgumentParser, *, seed: bool = True, threads_default: int = 0, resume: bool = False
) -> None:
    """Add `--out`, `--overwrite` (and `--resume`, `--seed`, `--threads`) to a command's parser."""
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="run folder (default runs/<command>-<time>); must be new or empty unless "
        + ("--resume/--overwrite" if resume else "--overwrite"),
    )
    p.add_argument("--overwrite", action="store_true", help="replace an earlier attnlab run in --out")
    if resume:
        p.add_argument("--resume", action="store_true", help="continue the run in --out from its newest checkpoint")
    if seed:
        p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--threads",
        type=int,
        default=threads_default,
        help=f"torch CPU threads (default {threads_default or 'torch' + chr(39) + 's choice'})",
    )


def run_mode(args: argparse.Namespace) -> str:
    """ "new", "resume" or "overwrite" from the parsed `--resume/--overwrite` flags (both at once is an error)."""
    resume, overwrite = bool(getattr(args, "resume", False)), bool(getattr(args, "overwrite", False))
    if resume and overwrite:
        raise InputError("--resume and --overwrite exclude each other")
    return "resume" if resume else "overwrite" if overwrite else "new"


def add_device_arg(p: argparse.ArgumentParser, precision: str = "", default: str | None = "cpu") -> None:
    """Add `--device` to a command's parser; `precision` says what the command computes in. `default=None` for
    resumable commands: a resumed run keeps its saved device unless --device is given."""
    from attnlab.core.device import DEVICE_HELP

    p.add_argument("--device", default=default, help=DEVICE_HELP + (f"; {precision}" if precision else ""))
