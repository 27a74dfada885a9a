"""`attnlab sweep` configuration: a sweep spec (TOML) and how to run it.

A spec names a command, fixed fields and the trials, with fields named as the command's config fields (an
option's dashes become underscores: `--seq-len` is `seq_len`):

    command = "bb train"
    [base]
    steps = 200
    [grid]                       # every combination ...
    optimizer = ["adam", "sgd"]
    lr = [1e-3, 3e-3]
    seed = [0, 1, 2]
    # ... or [[list]] tables (one trial each), or
    # [random] n = 8, seed = 0, and [random.fields]
    # lr = {low = 1e-4, high = 1e-2, log = true}, attention = ["softmax", "relu"]
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.errors import InputError, check, check_int

MAX_TRIALS_WITHOUT_YES = 64


@dataclass(frozen=True)
class SweepSpec:
    """A parsed spec. grid: {field: [values]}; trials: explicit list of {field: value}; random: see module doc."""

    command: str
    base: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, list[Any]] = field(default_factory=dict)
    trials: tuple[dict[str, Any], ...] = ()
    random: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check(isinstance(self.command, str) and self.command.strip(), "spec: `command` must name a command")
        check(self.grid or self.trials or self.random, "spec: give a [grid], [[list]] trials or [random] draws")
        for name, values in self.grid.items():
            check(isinstance(values, list) and len(values) > 0, f"spec: grid field {name!r} needs a non-empty list")
        if self.random:
            check_int(self.random.get("n", 0), 1, "spec: random.n")
            check(
                isinstance(self.random.get("fields"), dict) and self.random["fields"],
                "spec: [random.fields] must name at least one field",
            )


@dataclass(frozen=True)
class SweepConfig:
    """How to run a spec: where, on which Ray cluster, with which resources per trial."""

    spec: SweepSpec
    address: str | None = None  # None: a local Ray instance on this machine
    cpus: int | None = None  # local instance size (default: all cores)
    threads_per_trial: int = 1
    gpus_per_trial: float = 0.0
    retries: int = 2  # retries of a trial whose worker died
    yes: bool = False  # allow more than MAX_TRIALS_WITHOUT_YES trials

    def __post_init__(self) -> None:
        check_int(self.threads_per_trial, 1, "--threads-per-trial")
        check_int(self.retries, 0, "--retries")
        if self.cpus is not None:
            check_int(self.cpus, 1, "--cpus")
        check(self.gpus_per_trial >= 0, f"--gpus-per-trial must be >= 0, got {self.gpus_per_trial}")


def _parse_toml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise InputError(f"sweep spec {path} not found")
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"sweep spec {path} is not valid TOML: {exc}") from None


def load_spec(path: str | Path) -> SweepSpec:
    """Read a TOML spec file; unknown top-level keys are a one-line error."""
    data = _parse_toml(Path(path))
    known = {"command", "base", "grid", "list", "random"}
    unknown = sorted(set(data) - known)
    check(not unknown, f"spec {path}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}")
    trials = data.get("list", [])
    check(
        isinstance(trials, list) and all(isinstance(t, dict) for t in trials),
        f"spec {path}: [[list]] must be tables of fields",
    )
    return SweepSpec(
        command=data.get("command", ""),
        base=data.get("base", {}),
        grid=data.get("grid", {}),
        trials=tuple(trials),
        random=data.get("random", {}),
    )
