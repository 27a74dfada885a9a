"""The vocabulary of the reproduction targets, shared by the studies that own them
(`attnlab/<study>/repro/targets.py`) and `attnlab reproduce`, which collects, runs, judges and writes them.

A `Target` is one row: the claim, the spec's threshold in words, `Check`s (the threshold as code), the experiments
it needs and its measure. A check compares one named number with a bound: `Check("attn_sink", ">=", 0.6)`.
Operators: `<`, `<=`, `>`, `>=`, `abs<=` (|x| <= bound) and `in` (lo <= x <= hi, bound a pair). The accessors
below read a measure's `runs` (experiment name -> `attnlab.reproduce.execute.Outcome`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

OPS = ("<", "<=", ">", ">=", "abs<=", "in")
# the kinds of rows (issue 39): a claim of the papers; a library check (the spec's CI tier: reducers, gradients,
# error lines, solvers on tiny or closed-form cases); a timing (a benchmark's time or memory). Counted apart.
CLAIM, CHECK, TIMING = "claim", "check", "timing"
GROUPS = (CLAIM, CHECK, TIMING)
SEED = "seed claim (issue 18), no row of its own in the spec"


@dataclass(frozen=True)
class Check:
    """`key op bound`, e.g. Check("backcopy_risk", "<", 0.05); `bound` is a pair for "in". `exact` names why a
    judged number has no sampling error (a count of the protocol's runs, a gate, a deterministic solve, a measured
    budget): its 95 % interval is the point itself, said so in the row (issue 39: every judged number has one)."""

    key: str
    op: str
    bound: Any
    exact: str = ""

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown operator {self.op!r}; valid: {', '.join(OPS)}")

    def passes(self, value: float) -> bool:
        """Whether a finite `value` satisfies the check (a non-finite value never does)."""
        if value is None or not math.isfinite(float(value)):
            return False
        x, b = float(value), self.bound
        if self.op == "in":
            return float(b[0]) <= x <= float(b[1])
        return {
            "<": x < b,
            "<=": x <= b,
            ">": x > b,
            ">=": x >= b,
            "abs<=": abs(x) <= b,
        }[self.op]

    def text(self) -> str:
        """The check as written, bounds to 6 significant digits."""
        if self.op == "in":
            return f"{self.key} in [{self.bound[0]:.6g}, {self.bound[1]:.6g}]"
        if self.op == "abs<=":
            return f"|{self.key}| <= {self.bound:.6g}"
        return f"{self.key} {self.op} {self.bound:.6g}"


CLAIMS_NOTE = (
    "threshold as in attnlab/{}/repro/verdicts.py verdict_{} (the spec's where it states one, else our first guess); "
    "claims_met is that function's own verdict"
)


@dataclass(frozen=True)
class Target:
    """One row of the reproduction table."""

    id: str
    study: str  # bb | real | consensus | paths
    spec: str  # where the spec states it
    claim: str
    threshold: str  # as the spec states it
    checks: tuple[Check, ...] = ()
    needs: tuple[str, ...] = ()
    measure: Callable[[dict], dict] | None = None
    not_run: str = ""  # why, when there is no measure
    note: str = ""  # how the threshold is read, definition differences, scale
    figure: str = ""  # the figure to link, relative to the folder of the first run in `needs`
    recorded: Recorded | None = None  # a run made by hand, judged when this profile does not measure the row
    group: str = CLAIM  # claim | check | timing (issue 39): which count the row is in
    # a second reading of the same target (another definition or bar), shown beside the verdict, never judged
    shown: tuple[Check, ...] = ()
    # numbers -> {judged key: attnlab.core.intervals.Interval}: the row's own 95 % intervals (bootstrap over
    # windows, MCSE, a CI its protocol computes), for rows whose measure reports one; seeds give the rest
    intervals: Callable[[dict], dict] | None = None

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise ValueError(f"{self.id}: group {self.group!r}; valid: {', '.join(GROUPS)}")


def grouped(rows: Iterable[Target], *, checks: Iterable[str] = (), timings: Iterable[str] = ()) -> list[Target]:
    """`rows` with the ids in `checks` in the check group and those in `timings` in the timing group; the rest
    are claims of the papers. Refuses an id that is not a row (a typo would silently count a check as a claim)."""
    rows, checks, timings = list(rows), set(checks), set(timings)
    unknown = (checks | timings) - {t.id for t in rows}
    if unknown or checks & timings:
        raise ValueError(f"grouped: unknown ids {sorted(unknown)} or ids in two groups {sorted(checks & timings)}")
    return [replace(t, group=CHECK if t.id in checks else TIMING if t.id in timings else t.group) for t in rows]


def with_reading(
    row: Target, *, shown: Iterable[Check] = (), intervals: Callable[[dict], dict] | None = None
) -> Target:
    """`row` with a second reading shown beside its verdict (`shown`, not judged) and/or its own intervals."""
    return replace(row, shown=tuple(shown), intervals=intervals if intervals is not None else row.intervals)


@dataclass(frozen=True)
class Recorded:
    """Numbers of a run made by hand and written up in the docs: judged by the target's checks when reproduce does
    not measure the row at its profile, so a known miss shows as missed (with where and how it was measured)."""

    numbers: tuple[tuple[str, float], ...]
    where: str  # the doc section and the scale it was measured at
    command: str  # the command that made it

    def as_dict(self) -> dict[str, float]:
        """The recorded numbers by name."""
        return dict(self.numbers)


def recorded(where: str, command: str, **numbers: float) -> Recorded:
    """A `Recorded` from keyword numbers."""
    return Recorded(tuple(numbers.items()), where, command)


def target(
    tid: str,
    study: str,
    spec: str,
    claim: str,
    threshold: str,
    *,
    checks: Iterable[Check] = (),
    needs: Iterable[str] = (),
    measure: Callable[[dict], dict] | None = None,
    not_run: str = "",
    note: str = "",
    figure: str = "",
    recorded: Recorded | None = None,
) -> Target:
    """A registry row (lists for checks/needs are fine: they become tuples)."""
    return Target(
        tid, study, spec, claim, threshold, tuple(checks), tuple(needs), measure, not_run, note, figure, recorded
    )


# --- reading a measure's runs ----------------------------------------------------------------------------------------
def run_of(runs: dict, name: str, sub: str = "") -> Any:
    """The RunResult of experiment `name`'s study run `sub` ("" for an experiment of one run)."""
    return runs[name].runs[sub]


def runs_of(runs: dict, name: str) -> dict:
    """sub -> RunResult of every study run of experiment `name`."""
    return runs[name].runs


def last_record(runs: dict, name: str) -> dict:
    return run_of(runs, name).tables["metrics"].to_dict("records")[-1]


def records_of(runs: dict, name: str) -> list[dict]:
    return run_of(runs, name).tables["metrics"].to_dict("records")


def folder_of(outcome: Any) -> Path:
    """The folder of an experiment: its one study run's, or the folder that holds its runs' sub-folders (a folder
    given as a path is itself)."""
    if isinstance(outcome, str | Path):
        return Path(outcome)
    sub, run = next(iter(outcome.runs.items()))
    return Path(run.path).parents[len(Path(sub).parts) - 1] if sub else Path(run.path)


def claim_numbers(verdict_fn: Any, folder: Path, key: str) -> dict:
    """{key: the verdict's number, "claims_met": 1.0 or 0.0} from `verdict_fn(folder) -> (number, met, why)`."""
    number, met, _ = verdict_fn(folder)
    return {key: number, "claims_met": float(met)}


def model_groups(runs: dict, name: str) -> dict:
    """{group ("periodic, MLP on"): its summary} of a `consensus model` run."""
    return run_of(runs, name).summary["groups"]


def computed(name: str, prefix: str) -> Any:
    """A measure that reads the numbers of the direct computation `name` whose keys start with `prefix` (the
    attention-paths unit checks: "T1_", "T4_", ...)."""

    def measure(runs: dict) -> dict:
        out = {k: v for k, v in runs[name].numbers.items() if k.startswith(prefix)}
        if not out:
            raise KeyError(f"{name} has no number {prefix}*")
        return out

    measure.__name__ = f"computed_{prefix.rstrip('_')}"
    return measure


# --- timings judged on a quiet machine (issue 39) --------------------------------------------------------------------
TIMING_THREADS = 2  # the specs' "on 2 cores" (consensus §11 B2, attention-paths B2)
QUIET_LOAD = 1.5  # a timing row is judged only when the 1-minute load average is below this at its start


class NotQuiet(ValueError):
    """A timing taken on a busy machine (or on fewer threads than the spec's): shown in the row, not judged."""


def machine_load() -> float:
    """The 1-minute load average now (`os.getloadavg`), recorded at the start of a timed experiment."""
    import os

    return float(os.getloadavg()[0])


def quiet_timing(numbers: dict, seconds_key: str) -> dict:
    """`numbers` of a timed experiment (with "threads" and "load_at_start") when they were taken on
    `TIMING_THREADS` threads with a load below `QUIET_LOAD`; else `NotQuiet` says so with the time and the load
    (the row is then 'not run' with that reason)."""
    if numbers["load_at_start"] >= QUIET_LOAD or numbers["threads"] < TIMING_THREADS:
        raise NotQuiet(f"not judged: {numbers[seconds_key]:.1f} s on {numbers['threads']:g} threads with a 1-minute "
                       f"load of {numbers['load_at_start']:.2f} at the start (judged only on {TIMING_THREADS} "
                       f"threads with a load below {QUIET_LOAD:g})")  # fmt: skip
    return numbers
