"""The one table of attnlab's rooms and studies, and every runnable command as (config class, run function).

`ROOMS` lists every top-level command in the order of `attnlab --help`; each is the package `attnlab/<command>/`.
A room with a `study` belongs to that spec study (the grouping `attnlab reproduce` and `attnlab demo` use; the
first room of a study holds its demo), and is a sub-package a notebook reaches as `attnlab.<command>`; a room
without one is a tool that runs or reads other runs. `attnlab/__init__.py`, `attnlab/cli.py`, `attnlab/demo.py` and
`attnlab reproduce` read this table (`tests/core/test_codebase.py` checks that no other list of them exists).

Each runnable room's `run.py` defines `RUNNERS: dict[str, tuple[type, Callable]]`, keyed by the full command as
typed after `attnlab` ("bb train", "scan", "consensus simulate", "paths solve"), mapping to its frozen config class
and its `run(config, out, mode=...) -> RunResult`; `resolve` finds one. Importing a room happens only when one of
its commands is asked for, so this module stays cheap (`import attnlab` reads it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from attnlab.errors import InputError


@dataclass(frozen=True)
class Room:
    """command: the first word after `attnlab` (and the package `attnlab.<command>`); study: the spec study it
    belongs to (None: a tool that runs or reads other runs); runs: its run.py has RUNNERS."""

    command: str
    study: str | None = None
    runs: bool = True


ROOMS: tuple[Room, ...] = (
    Room("bb", "bb"),
    Room("scan", "real"),
    Room("series", "real"),
    Room("ablate", "real"),
    Room("deploy", "real"),
    Room("consensus", "consensus"),
    Room("paths", "paths"),
    Room("sweep"),
    Room("reproduce"),
    Room("compare"),
    Room("view", runs=False),  # serves a run folder, writes none
)
# each spec study's section title in the reproduction report, in the order of ROOMS
STUDY_TITLES = MappingProxyType({
    "bb": "Extreme tokens, toy model (spec extreme-tokens)",
    "real": "Extreme tokens, real models (spec extreme-tokens)",
    "consensus": "Consensus (spec consensus)",
    "paths": "Attention paths (spec attention-paths)",
})  # fmt: skip
# each spec study's doc under docs/, which holds its generated rows of the reproduction table
STUDY_DOCS = MappingProxyType({
    "bb": "extreme-tokens.md",
    "real": "real-models.md",
    "consensus": "consensus.md",
    "paths": "attention-paths.md",
})  # fmt: skip
# first word of a runnable command -> the package whose run.py holds its RUNNERS
STUDY_PACKAGES = MappingProxyType({r.command: f"attnlab.{r.command}" for r in ROOMS if r.runs})


def commands() -> tuple[str, ...]:
    """Every top-level command, in the order of `attnlab --help`."""
    return tuple(r.command for r in ROOMS)


def study_rooms() -> tuple[str, ...]:
    """The rooms that belong to a spec study: the sub-packages `attnlab.<name>` a notebook imports."""
    return tuple(r.command for r in ROOMS if r.study is not None)


def studies() -> tuple[str, ...]:
    """The spec studies, in the order of their first room (what `attnlab reproduce` and `attnlab demo` take)."""
    return tuple(dict.fromkeys(r.study for r in ROOMS if r.study is not None))


def demo_modules() -> dict[str, str]:
    """{spec study: the module whose `run_demo(out, seed)` is its part of `attnlab demo`} (its first room's demo)."""
    first: dict[str, str] = {}
    for r in ROOMS:
        if r.study is not None:
            first.setdefault(r.study, f"attnlab.{r.command}.demo")
    return first


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
    """Every runnable command name, in the order of ROOMS (imports each room's run module)."""
    names: list[str] = []
    for package in STUDY_PACKAGES.values():
        try:
            names += list(importlib.import_module(package + ".run").RUNNERS)
        except ModuleNotFoundError:
            continue
    return names
