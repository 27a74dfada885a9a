"""The verdict rule of issue 39 on constructed cases with known answers: the interval methods, the five verdicts and
the replicates that would decide an inconclusive row (attnlab.core.intervals)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnlab.core.intervals import (
    INCONCLUSIVE,
    MET,
    MISSED,
    NOT_RUN,
    REPORTED,
    Interval,
    bootstrap_interval,
    decide,
    judge,
    mcse_interval,
    replicates_to_decide,
    t_interval,
)
from attnlab.core.targets import Check


def _iv(low: float, high: float, n: int = 3) -> Interval:
    return Interval((low + high) / 2, low, high, n, "constructed")


def test_t_interval_is_the_textbook_one() -> None:
    """Three seeds 1, 2, 3: mean 2, s = 1, half-width t_{0.975, 2} / √3, where Student's t with 2 degrees of
    freedom has the closed-form quantile t_p = (2p - 1) √(2 / (4p(1 - p))) (4.3027 at p = 0.975)."""
    iv = t_interval([1.0, 2.0, 3.0])
    p = 0.975
    half = (2 * p - 1) * math.sqrt(2 / (4 * p * (1 - p))) / math.sqrt(3)
    assert (iv.estimate, iv.replicates) == (2.0, 3)
    # derived bound: scipy's quantile is accurate to ~1e-14 relative; the rest is a few roundings of numbers ~5
    assert iv.low == pytest.approx(2 - half, abs=1e-12) and iv.high == pytest.approx(2 + half, abs=1e-12)


def test_t_interval_covers_the_mean_95_percent_of_the_time() -> None:
    """Coverage over 2,000 simulated 3-seed experiments: 0.95 ± 3 binomial standard errors (0.0146)."""
    rng = np.random.default_rng(0)
    data = rng.normal(0.7, 0.2, size=(2000, 3))
    covered = np.mean([(iv.low <= 0.7 <= iv.high) for iv in map(t_interval, data)])
    assert abs(covered - 0.95) < 3 * math.sqrt(0.95 * 0.05 / 2000)


def test_bootstrap_interval_is_degenerate_on_constant_windows_and_covers_otherwise() -> None:
    rng = np.random.default_rng(1)
    flat = bootstrap_interval([0.25] * 16, rng)  # 0.25: exact in binary, so every mean is exact
    assert (flat.low, flat.estimate, flat.high) == (0.25, 0.25, 0.25)
    assert flat.method == "percentile bootstrap over windows"
    # 300 simulated sets of 32 windows: the percentile bootstrap of a mean covers 0.95 up to its known
    # small-sample undercoverage (about 0.93 at n = 32) ± 3 binomial standard errors (0.039)
    data = rng.exponential(1.0, size=(300, 32))
    covered = np.mean([(iv.low <= 1.0 <= iv.high) for iv in (bootstrap_interval(d, rng, resamples=1000) for d in data)])
    assert 0.93 - 0.039 <= covered <= 0.95 + 0.039


def test_mcse_interval_uses_the_normal_quantile() -> None:
    iv = mcse_interval(0.5, 0.01, draws=400)
    assert iv.high - iv.low == pytest.approx(2 * 1.959963984540054 * 0.01, rel=1e-12)


def test_too_few_or_non_finite_replicates_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 2 replicates"):
        t_interval([1.0])
    with pytest.raises(ValueError, match="replicate 1 is not finite"):
        t_interval([1.0, float("nan"), 2.0])


@pytest.mark.parametrize(
    ("check", "low", "high", "expected"),
    [
        (Check("x", ">", 1.5), 1.6, 2.0, MET),
        (Check("x", ">", 1.5), 1.0, 1.4, MISSED),
        (Check("x", ">", 1.5), 1.40, 1.62, INCONCLUSIVE),  # SC-3layer's kind of case: it straddles 1.5
        (Check("x", ">=", 1.5), 1.5, 1.7, MET),
        (Check("x", "<", 0.1), 0.02, 0.08, MET),
        (Check("x", "<", 0.1), 0.11, 0.2, MISSED),
        (Check("x", "<", 0.1), 0.05, 0.15, INCONCLUSIVE),
        (Check("x", "abs<=", 0.1), -0.05, 0.05, MET),
        (Check("x", "abs<=", 0.1), 0.2, 0.3, MISSED),
        (Check("x", "abs<=", 0.1), -0.3, -0.2, MISSED),
        (Check("x", "abs<=", 0.1), -0.3, 0.3, INCONCLUSIVE),  # covers the whole band and both sides of it
        (Check("x", "in", (0.0, 1.0)), 0.2, 0.8, MET),
        (Check("x", "in", (0.0, 1.0)), 1.2, 1.8, MISSED),
        (Check("x", "in", (0.0, 1.0)), -0.5, 1.5, INCONCLUSIVE),
        (Check("x", "in", (0.0, 1.0)), 0.5, 1.5, INCONCLUSIVE),
    ],
)
def test_each_check_is_decided_by_where_the_interval_lies(check, low, high, expected) -> None:
    assert decide(check, _iv(low, high)) == expected


def test_a_row_is_missed_when_any_check_is_then_inconclusive_then_met() -> None:
    a, b = Check("a", ">", 0), Check("b", "<", 1)
    assert judge((a, b), {"a": _iv(1, 2), "b": _iv(0, 0.5)}) == MET
    assert judge((a, b), {"a": _iv(-1, 2), "b": _iv(0, 0.5)}) == INCONCLUSIVE
    assert judge((a, b), {"a": _iv(-1, 2), "b": _iv(2, 3)}) == MISSED
    assert judge((a, b), {"a": _iv(1, 2)}) == MISSED  # a number the row needs is missing
    assert judge((), {"a": _iv(1, 2)}) == REPORTED  # no bar: shown, not counted
    assert judge((a,), None) == NOT_RUN


def test_replicates_to_decide_follow_the_square_root_law() -> None:
    """Estimate 1.45 ± 0.10 over 3 seeds against a bar at 1.5: the half-width must fall to 0.05, a factor of 2,
    so 3 · 2² = 12 seeds in all."""
    iv = Interval(1.45, 1.35, 1.55, 3, "constructed")
    assert replicates_to_decide(Check("x", ">", 1.5), iv) == 12
    assert replicates_to_decide(Check("x", ">", 1.45), iv) is None  # the estimate sits on the bar
    assert replicates_to_decide(Check("x", "in", (1.0, 1.5)), iv) == 12  # the nearer bound decides
