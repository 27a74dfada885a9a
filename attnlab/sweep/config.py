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

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.errors import InputError, check, check_finite, check_int, regular_file

MAX_TRIALS_WITHOUT_YES = 64
MAX_TRIALS = 10_000  # even with --yes: planning alone takes ~3 ms a trial, and each trial writes a run folder
RANDOM_KEYS = ("n", "seed", "fields")


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
            _check_random(self.random)

    def count(self) -> int:
        """The number of trials the spec makes (before duplicates are merged), counted without making them."""
        grid = math.prod(len(v) for v in self.grid.values()) if self.grid else 0
        return grid + len(self.trials) + (int(self.random["n"]) if self.random else 0)


def _check_random(random: dict[str, Any]) -> None:
    unknown = sorted(set(random) - set(RANDOM_KEYS))
    check(not unknown, f"spec: unknown key(s) {', '.join(unknown)} in [random]; valid: {', '.join(RANDOM_KEYS)}")
    check_int(random.get("n", 0), 1, "spec: random.n")
    check_int(random.get("seed", 0), 0, "spec: random.seed")
    fields = random.get("fields")
    if not isinstance(fields, dict) or not fields:
        raise InputError("spec: [random.fields] must name at least one field")
    for name, law in fields.items():
        _check_law(name, law)


def _check_law(name: str, law: Any) -> None:
    """A random field: a non-empty list of choices, or {low, high[, log]} with finite low <= high (> 0 if log)."""
    what = f"spec: random field {name!r}"
    if isinstance(law, list):
        check(law, f"{what} needs a non-empty list of choices")
        return
    check(
        isinstance(law, dict) and {"low", "high"} <= set(law) <= {"low", "high", "log"},
        f"{what} needs a list of choices or {{low, high[, log]}}",
    )
    low, high = check_finite(law["low"], f"{what}: low"), check_finite(law["high"], f"{what}: high")
    check(low <= high, f"{what}: low must be <= high, got low = {law['low']}, high = {law['high']}")
    check(isinstance(law.get("log", False), bool), f"{what}: log must be true or false, got {law.get('log')!r}")
    check(not law.get("log") or low > 0, f"{what}: a log-uniform law needs low > 0, got low = {law['low']}")


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
        gpus = check_finite(self.gpus_per_trial, "--gpus-per-trial")
        check(gpus >= 0, f"--gpus-per-trial must be >= 0, got {self.gpus_per_trial}")
        check(gpus <= 1 or gpus.is_integer(), f"--gpus-per-trial above 1 must be whole (Ray's rule), got {gpus:g}")
        if gpus == 0 and wants_gpu(self.spec):  # trials with device = "cuda" each reserve a GPU through Ray
            object.__setattr__(self, "gpus_per_trial", 1.0)
        if self.cpus is not None:
            check(
                self.threads_per_trial <= self.cpus,
                f"--threads-per-trial {self.threads_per_trial} is more than --cpus {self.cpus}: no trial could start",
            )
        check_trial_count(self.spec.count(), self.yes)


def wants_gpu(spec: SweepSpec) -> bool:
    """Whether a trial of `spec` sets device = "cuda" or "cuda:N" (base, grid or [[list]])."""
    values = [spec.base.get("device"), *spec.grid.get("device", ()), *(t.get("device") for t in spec.trials)]
    return any(isinstance(v, str) and v.startswith("cuda") for v in values)


def check_trial_count(n: int, yes: bool) -> None:
    """Refuse more than MAX_TRIALS_WITHOUT_YES trials without --yes, and more than MAX_TRIALS at all."""
    check(
        n <= MAX_TRIALS,
        f"the spec makes {n:,} trials; the limit is {MAX_TRIALS:,} (split the sweep into several specs)",
    )
    check(
        n <= MAX_TRIALS_WITHOUT_YES or yes,
        f"the spec makes {n} trials (more than {MAX_TRIALS_WITHOUT_YES}); pass --yes to run them",
    )


def _parse_toml(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise InputError(f"sweep spec {path} not found")
    regular_file(path, "sweep spec")
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"sweep spec {path} is not valid TOML: {exc}") from None
    except RecursionError:  # e.g. 100,000 nested `[`: the parser recurses once per level
        raise InputError(f"sweep spec {path} is not valid TOML: nested too deeply") from None


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
