"""Every runnable command as (config class, run function), found by name: what `rerun` and sweeps call.

Each study's `run.py` defines `RUNNERS: dict[str, tuple[type, Callable]]`, keyed by the full command as typed
after `attnlab` ("bb train", "scan", "consensus simulate", "paths solve"), mapping to its frozen config class
and its `run(config, out, mode=...) -> RunResult`. `STUDY_PACKAGES` lists where to look; importing a study
happens only when one of its commands is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from attnlab.errors import InputError

# first word of a command -> the package whose run.py holds its RUNNERS
STUDY_PACKAGES = {
    "bb": "attnlab.bb",
    "scan": "attnlab.scan",
    "series": "attnlab.series",
    "ablate": "attnlab.ablate",
    "consensus": "attnlab.consensus",
    "paths": "attnlab.paths",
    "sweep": "attnlab.sweep",
    "compare": "attnlab.compare",
    "reproduce": "attnlab.reproduce",
    "deploy": "attnlab.deploy",
}


def resolve(command: str) -> tuple[type, Callable[..., Any]]:
    """(config class, run function) of `command`, e.g. resolve("bb train"); one-line error if unknown."""
    words = command.split()
    if not words or words[0] not in STUDY_PACKAGES:
        raise InputError(f"unknown command {command!r}; studies: {', '.join(STUDY_PACKAGES)}")
    runners = importlib.import_module(STUDY_PACKAGES[words[0]] + ".run").RUNNERS
    key = " ".join(words)
    if key not in runners:
        raise InputError(f"unknown command {command!r}; runnable: {', '.join(sorted(runners))}")
    return runners[key]


def all_commands() -> list[str]:
    """Every runnable command name, in study order (imports each study's run module)."""
    names: list[str] = []
    for package in STUDY_PACKAGES.values():
        try:
            names += list(importlib.import_module(package + ".run").RUNNERS)
        except ModuleNotFoundError:
            continue
    return names
