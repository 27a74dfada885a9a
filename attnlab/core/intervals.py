"""Verdicts decided by a 95 % interval (issue 39): the interval methods, the five verdicts and the rule between them.

A claim row's judged number is an estimate with an interval, made by one named method:
- `t_interval`: over independent seeds of a trained model (Student's t, n - 1 degrees of freedom);
- `bootstrap_interval`: over resampled windows, prompts or starts of a fixed model (percentile bootstrap);
- `mcse_interval`: a sampler's estimate with its Monte-Carlo standard error (normal quantile).
`decide(check, interval)` then says `met` (the interval clears the bar), `missed` (it lies on the wrong side) or
`inconclusive` (it straddles the bar); `judge` combines a row's checks, `reported` marks a row with no bar, and
`replicates_to_decide` says how many seeds or windows in all would make an inconclusive interval clear its bar.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from attnlab.core.targets import Check

MET, MISSED, INCONCLUSIVE, REPORTED, NOT_RUN = "met", "missed", "inconclusive", "reported", "not run"
VERDICTS = (MET, MISSED, INCONCLUSIVE, REPORTED, NOT_RUN)
T_OVER_SEEDS = "t-interval over seeds"
BOOTSTRAP = "percentile bootstrap over {}"
MCSE = "estimate ± 1.96 MCSE"


@dataclass(frozen=True)
class Interval:
    """A judged number: its estimate, the 95 % interval [low, high], the replicates behind it and the method."""

    estimate: float
    low: float
    high: float
    replicates: int
    method: str

    def as_pair(self) -> list[float]:
        return [self.low, self.high]


def _finite(values: Sequence[float], what: str) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"{what} needs at least 2 replicates, got {x.size}")
    if not np.isfinite(x).all():
        raise ValueError(f"{what}: replicate {int(np.argmin(np.isfinite(x)))} is not finite")
    return x


def t_interval(values: Sequence[float], level: float = 0.95) -> Interval:
    """Mean of `values` (one per seed) ± t_{(1+level)/2, n-1} · s / √n."""
    x = _finite(values, "a t-interval")
    mean, half = float(x.mean()), float(stats.t.ppf((1 + level) / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return Interval(mean, mean - half, mean + half, int(x.size), T_OVER_SEEDS)


def seeds_interval(values: Sequence[float], level: float = 0.95) -> Interval | None:
    """`t_interval` over seeds, or None where a seed is NaN or fewer than two are finite. A seed at ±inf (a ratio
    whose denominator vanished, e.g. a peak that fell to zero) enters at the most extreme finite seed on its side,
    and the interval's end on that side is ±inf: the other end stays conservative (a ≥ bar met only when the finite
    seeds alone clear it) and the estimate is ±inf."""
    x = np.asarray(values, dtype=float)
    finite = x[np.isfinite(x)]
    if np.isnan(x).any() or finite.size < 2:
        return None
    if finite.size == x.size:
        return t_interval(x.tolist(), level)
    iv = t_interval(np.clip(x, finite.min(), finite.max()), level)
    up, down = bool((x == np.inf).any()), bool((x == -np.inf).any())
    estimate = math.inf if up and not down else -math.inf if down and not up else math.nan
    return Interval(estimate, -math.inf if down else iv.low, math.inf if up else iv.high, int(x.size),
                    f"{T_OVER_SEEDS} (a seed at ±inf entered at the extreme finite seed, that end open)")  # fmt: skip


def bootstrap_interval(
    values: Sequence[float],
    rng: np.random.Generator,
    *,
    over: str = "windows",
    resamples: int = 4000,
    level: float = 0.95,
    statistic: Callable[[np.ndarray], np.ndarray] = lambda a: a.mean(axis=-1),
) -> Interval:
    """`statistic` of `values` (one per window/prompt/start) with the percentile interval of `resamples` resamples
    drawn with replacement from `rng`. `statistic` maps [resamples, n] to [resamples]."""
    x = _finite(values, "a bootstrap interval")
    draws = statistic(x[rng.integers(0, x.size, size=(resamples, x.size))])
    low, high = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return Interval(float(statistic(x[None, :])[0]), float(low), float(high), int(x.size), BOOTSTRAP.format(over))


def mcse_interval(estimate: float, mcse: float, draws: int, level: float = 0.95) -> Interval:
    """A sampler's estimate ± z_{(1+level)/2} · MCSE (its Monte-Carlo standard error over `draws` draws)."""
    if not (math.isfinite(estimate) and math.isfinite(mcse) and mcse >= 0):
        raise ValueError(f"an MCSE interval needs a finite estimate and MCSE >= 0, got {estimate}, {mcse}")
    half = float(stats.norm.ppf((1 + level) / 2)) * mcse
    return Interval(float(estimate), estimate - half, estimate + half, int(draws), MCSE)


def decide(check: Check, interval: Interval) -> str:
    """met / missed / inconclusive of one check: met when every value in [low, high] passes it, missed when none
    does, inconclusive when the interval straddles the bar."""
    lo, hi = interval.low, interval.high
    if _passes_end(check, lo) and _passes_end(check, hi):
        return MET
    if check.op == "in":
        a, b = float(check.bound[0]), float(check.bound[1])
        return MISSED if hi < a or lo > b else INCONCLUSIVE
    if check.op == "abs<=":
        return MISSED if hi < -check.bound or lo > check.bound else INCONCLUSIVE
    return MISSED if not _passes_end(check, lo) and not _passes_end(check, hi) else INCONCLUSIVE


def _passes_end(check: Check, end: float) -> bool:
    """Whether an interval's end passes the check: an open end (±inf, `seeds_interval`) compares as the limit it
    is (+inf passes a ≥ bar), where a point that is not finite never passes (`Check.passes`)."""
    if math.isinf(end):
        big = math.copysign(1e308, end)
        return check.passes(big)
    return check.passes(end)


def judge(checks: Sequence[Check], intervals: Mapping[str, Interval] | None) -> str:
    """A row's verdict: not run without numbers, reported without a bar, else missed when any check is missed,
    inconclusive when any straddles, met when all are met."""
    if intervals is None:
        return NOT_RUN
    if not checks:
        return REPORTED
    found = [decide(c, intervals[c.key]) if c.key in intervals else MISSED for c in checks]
    return MISSED if MISSED in found else INCONCLUSIVE if INCONCLUSIVE in found else MET


def replicates_to_decide(check: Check, interval: Interval) -> int | None:
    """How many replicates in all would make the interval clear the nearest bar, if the estimate and the spread
    stayed as they are (the half-width shrinks as 1/√n): n · (half-width / distance)², rounded up. None when the
    estimate sits on the bar, or the estimate or an end is infinite (no number of replicates decides it)."""
    bounds = check.bound if check.op == "in" else (-check.bound, check.bound) if check.op == "abs<=" else (check.bound,)
    distance = min(abs(interval.estimate - float(b)) for b in bounds)
    if distance == 0 or not math.isfinite(distance) or not math.isfinite(interval.high - interval.low):
        return None
    half = max(interval.high - interval.estimate, interval.estimate - interval.low)
    return max(interval.replicates, math.ceil(interval.replicates * (half / distance) ** 2))
