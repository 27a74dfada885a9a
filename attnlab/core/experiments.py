"""The vocabulary of the study runs behind the reproduction targets, shared by the studies that own them
(`attnlab/<study>/repro/runs.py`) and `attnlab reproduce`, which merges their tables (`attnlab.reproduce.experiments`)
and runs them.

An experiment is a list of `Run(sub, command, config)`: a study command (as typed after `attnlab`) and its config
fields, run through `attnlab.core.registry.resolve` into runs/<experiment>/<sub>, so `attnlab rerun` can redo any of
them; or a direct computation of library functions (`compute`, the studies' `repro/checks*.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Run:
    """One study run: `command` (as typed after `attnlab`) with the config fields `config`, into the experiment's
    folder / `sub` ("" = the experiment's folder itself). Run through `attnlab.core.registry.resolve`, so `attnlab
    rerun` redoes it from the folder's config.json."""

    sub: str
    command: str
    config: Mapping[str, Any] | Callable[[], Mapping[str, Any]]  # a callable: fields known once earlier runs ran


@dataclass(frozen=True)
class Experiment:
    """The study runs behind some targets: `runs(seed, size, root)` lists them (root: the folder of all
    experiments, for the runs that read another's folder); `figure(folder)` draws a figure across its runs, after
    them. A `compute(seed, size)` experiment instead calls library functions directly and returns numbers."""

    runs: Callable[[int, dict, Path], list[Run]] | None = None
    figure: Callable[[Path], Any] | None = None
    compute: Callable[[int, dict], dict] | None = None


def one(command: str, fields: Callable[[int, dict, Path], dict]) -> Experiment:
    """An experiment of one run of `command` into its own folder, config fields `fields(seed, size, root)`."""
    return Experiment(runs=lambda seed, size, root: [Run("", command, fields(seed, size, root))])


def later(command: str, fields: Callable[[int, dict, Path], dict]) -> Experiment:
    """Like `one`, with the config built only when the run starts (it validates another experiment's folder)."""
    return Experiment(runs=lambda seed, size, root: [Run("", command, lambda: fields(seed, size, root))])
