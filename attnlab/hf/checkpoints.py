"""A checkpoint series of a model: which checkpoints a `--model` / `--revision` argument names, and each one's
label and training step (read by `attnlab scan` over a series, and by the reproduction run that scans one)."""

from __future__ import annotations

import re
from pathlib import Path

from attnlab.errors import InputError


def checkpoint_label(model: str, revision: str | None) -> str:
    """A short name for one checkpoint: the revision, else the folder's (or hub id's) last component."""
    return revision if revision else Path(model.rstrip("/")).name or model


def checkpoint_step(label: str, index: int) -> int:
    """The training step of a checkpoint from its label: 'step1000-tokens4B' -> 1000, 'ckpt-30' -> 30, else index."""
    m = re.search(r"step[-_]?(\d+)", label, re.IGNORECASE)
    if m:
        return int(m.group(1))
    nums = re.findall(r"\d+", label)
    return int(nums[-1]) if nums else index


def checkpoints_in_folder(folder: str | Path) -> list[str]:
    """The checkpoint sub-folders (each with a config.json) of a folder that has none itself, by training step."""
    root = Path(folder).expanduser()
    subs = [p for p in root.iterdir() if p.is_dir() and (p / "config.json").is_file()] if root.is_dir() else []
    if not subs:
        raise InputError(f"{root} holds no checkpoint folders (sub-folders with a config.json)")
    return [str(p) for p in sorted(subs, key=lambda p: (checkpoint_step(p.name, 0), p.name))]


def expand_series(models: list[str], revisions: list[str]) -> tuple[tuple[str, str | None], ...]:
    """(model, revision) pairs of a series, or () for a single checkpoint.

    One model and several revisions: that model at each revision. Several models: each at its default revision
    (at most one --revision, applied to all). One local folder without a config.json: its checkpoint sub-folders."""
    if any(not str(m).strip() for m in models):  # Path("") is ".": it would read this folder as a series
        raise InputError("--model is an empty name; give 'smollm2', a local model folder or a hub id (gpt2, org/name)")
    if len(models) > 1 and len(revisions) > 1:
        raise InputError("a checkpoint series takes several --model or several --revision, not both")
    if len(revisions) > 1:
        return tuple((models[0], r) for r in revisions)
    rev = revisions[0] if revisions else None
    if len(models) == 1:
        path = Path(models[0]).expanduser()
        if path.is_dir() and not (path / "config.json").is_file():
            return tuple((m, None) for m in checkpoints_in_folder(path))
        return ()
    if len(set(models)) != len(models):
        raise InputError(f"--model: {models} repeats a checkpoint")
    return tuple((m, rev) for m in models)
