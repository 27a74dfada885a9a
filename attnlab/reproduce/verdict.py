"""Thresholds as code: a target's `Check`s against its measured numbers and their 95 % intervals give one of the five
verdicts of issue 39 (`attnlab.core.intervals`), and why.

A check compares one named number with a bound: `Check("attn_sink", ">=", 0.6)`. Operators: `<`, `<=`, `>`,
`>=`, `abs<=` (|x| <= bound) and `in` (lo <= x <= hi, bound a pair). Each checked number is judged by its interval
(`intervals.decide`: met when the interval clears the bar, missed when it lies on the wrong side, inconclusive when
it straddles it); a number without an interval (one seed, one run) is judged as a point, and the row says so. A row
is *met* when every check is met, *missed* when one is missed or its number is missing / not finite,
*inconclusive* otherwise (with how many replicates in all would decide it), *reported* when it has no bar, *not
run* when it has no numbers at all (`intervals.judge`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from attnlab.core.intervals import (
    INCONCLUSIVE,
    MET,
    MISSED,
    NOT_RUN,
    REPORTED,
    VERDICTS,
    Interval,
    decide,
    judge,
    replicates_to_decide,
)
from attnlab.core.targets import OPS, Check  # noqa: F401 - the checks' home, re-exported

__all__ = ["INCONCLUSIVE", "MET", "MISSED", "NOT_RUN", "REPORTED", "VERDICTS", "Check", "fmt", "verdict"]
SINGLE = "single run: no interval (the point estimate is judged)"


def fmt(x: Any) -> str:
    """A number in 4 significant digits (ints and strings as they are)."""
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return str(x)
    if isinstance(x, int):
        return str(x)
    x = float(x)
    if not math.isfinite(x):
        return str(x)
    return f"{x:.4g}"


def _number(value: Any) -> float | None:
    """`value` as a finite float, else None (missing, a string, NaN or inf)."""
    if value is None or isinstance(value, bool | str):
        return None if not isinstance(value, bool) else float(value)
    x = float(value)
    return x if math.isfinite(x) else None


def point(value: float) -> Interval:
    """A number without an interval, judged as a point: [x, x] from one replicate."""
    return Interval(value, value, value, 1, SINGLE)


def judged_intervals(checks: Iterable[Check], numbers: Mapping[str, Any],
                     intervals: Mapping[str, Interval] | None) -> dict[str, Interval]:  # fmt: skip
    """The interval each check is judged by: the row's own where it has one, else its number as a point; a
    missing or non-finite number has none (the check is missed)."""
    out: dict[str, Interval] = {}
    for c in checks:
        if intervals and c.key in intervals:
            out[c.key] = intervals[c.key]
        elif (x := _number(numbers.get(c.key))) is not None:
            out[c.key] = point(x)
    return out


def _check_text(c: Check, numbers: Mapping[str, Any], iv: Interval | None) -> str:
    """One check's part of `why`: the value (and interval) and its decision."""
    if iv is None:
        return f"{c.text()}: {fmt(numbers.get(c.key))} NO"
    if iv.replicates == 1 and iv.low == iv.high:
        return f"{c.text()}: {fmt(iv.estimate)} {'yes' if c.passes(iv.estimate) else 'NO'}"
    d = decide(c, iv)
    text = f"{c.text()}: {fmt(iv.estimate)} [{fmt(iv.low)}, {fmt(iv.high)}] {d}"
    if d == INCONCLUSIVE:
        n = replicates_to_decide(c, iv)
        more = "no number of replicates decides it" if n is None else f"about {n} replicates in all would decide it"
        text += f" ({more})"
    return text


def shown_text(shown: Iterable[Check], numbers: Mapping[str, Any]) -> str:
    """The second reading, shown beside the verdict and not judged."""
    parts = []
    for c in shown:
        x = _number(numbers.get(c.key))
        parts.append(f"{c.text()}: {fmt(numbers.get(c.key))} {'yes' if x is not None and c.passes(x) else 'no'}")
    return f"shown, not judged: {'; '.join(parts)}" if parts else ""


def verdict(
    checks: tuple[Check, ...],
    numbers: Mapping[str, Any] | None,
    reason: str = "",
    intervals: Mapping[str, Interval] | None = None,
    shown: tuple[Check, ...] = (),
) -> tuple[str, str]:
    """(verdict, why) of one target: `numbers` None means not run (`reason` says why); `intervals`: the judged
    numbers' 95 % intervals (absent: the point is judged); `shown`: a second reading, in `why`, not judged."""
    if numbers is None:
        return NOT_RUN, reason or "not run"
    extra = shown_text(shown, numbers)
    if not checks:
        return REPORTED, "; ".join(x for x in ("no bar: shown, not counted", extra) if x)
    ivs = judged_intervals(checks, numbers, intervals)
    parts = [_check_text(c, numbers, ivs.get(c.key)) for c in checks]
    return judge(checks, ivs), "; ".join([*parts, *([extra] if extra else [])])
