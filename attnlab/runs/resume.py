"""The config of a resumed run (`--resume`, `mode="resume"`), checked in the run function so that the CLI and a
notebook get the same answer. Imports no torch: a study's `cli.py` builds a `Resume` from its flags.

    bb.train(Resume(changes={"steps": 400}), "runs/bb", mode="resume")   # what `bb train --resume --steps 400` does
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from attnlab.errors import InputError
from attnlab.runs import config_hash

C = TypeVar("C")


@dataclass(frozen=True)
class Resume:
    """The config of `mode="resume"` given as changes to the run's saved config (what `--resume --steps 40` says).

    A notebook may pass a full config instead; either way the run refuses a change to a field it may not change."""

    changes: Mapping[str, Any] = field(default_factory=dict)


def config_diff(old: dict, new: dict, may_change: Collection[str]) -> list[str]:
    """'field: old -> new' for every field that differs and may not change on resume (sorted by field)."""
    return [
        f"{k}: {old.get(k)!r} -> {new.get(k)!r}"
        for k in sorted(set(old) | set(new))
        if k not in may_change and old.get(k) != new.get(k)
    ]


def resumed_config(
    config: C | Resume,
    out: str | Path | None,
    command: str,
    read_saved: Callable[[Path], C],
    may_change: Collection[str],
) -> C:
    """The config a resumed run continues with: the saved one (read by `read_saved`) with the changes of a `Resume`,
    or `config` itself; one line listing every field that differs from the saved config and may not change."""
    if out is None:
        raise InputError(f"--resume needs --out pointing at an existing `{command}` run folder")
    saved = read_saved(Path(out))
    old = saved.to_dict()  # type: ignore[attr-defined]
    if isinstance(config, Resume):
        unknown = sorted(set(config.changes) - set(old))
        if unknown:
            raise InputError(f"--resume: {command} has no setting {', '.join(unknown)}")
        new = {**old, **config.changes}
    else:
        new = config.to_dict()  # type: ignore[attr-defined]
    diff = config_diff(old, new, may_change)
    if diff:
        raise InputError(f"--resume: the config differs from the saved one in {out}: {'; '.join(diff)}")
    if not isinstance(config, Resume):
        return config
    return dataclasses.replace(saved, **{k: v for k, v in config.changes.items() if k in may_change})  # type: ignore


def frozen_hash(config: dict, may_change: Collection[str]) -> str:
    """The hash that ties a checkpoint to its config: of every field but those a resumed run may change."""
    return config_hash({k: v for k, v in config.items() if k not in may_change})


def not_a_config(config: object, mode: str, command: str) -> None:
    """Refuse a `Resume` outside `mode="resume"` (one line)."""
    if isinstance(config, Resume) and mode != "resume":
        raise InputError(f"{command}: Resume(...) continues a run; pass mode='resume' (got mode={mode!r})")
