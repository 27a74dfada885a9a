"""Intervals of the consensus sphere-dynamics rows R2c, R4b, R4c, R5b and R8 (issue 39: a fixed model resamples
what varies): the percentile bootstrap over starts of a worst case, R8's bootstrap over prompts, and the verdict
each row's measure and intervals give on constructed numbers (docs/consensus.md, "Intervals of the
sphere-dynamics rows")."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.consensus.repro import checks_llama as consensus_llama
from attnlab.consensus.repro.checks_theory import per_start_numbers
from attnlab.consensus.repro.targets import TARGETS, worst_over_starts
from attnlab.consensus.stats import spearman
from attnlab.core.intervals import BOOTSTRAP, INCONCLUSIVE, MET, MISSED
from attnlab.reproduce.execute import Outcome
from attnlab.reproduce.run import judged_row

ROWS = {t.id: t for t in TARGETS}
# row -> (judged key, its bar (<=, <), the other numbers its measure needs)
WORST = {
    "R2c": ("worst_rel_err", 0.05, {"full_SA_rel_err": 0.0, "causal_SA_rel_err": None}),
    "R4b": ("R4b_max_misalignment", 1e-10, {}),
    "R4c": ("R4c_max_rel_err_lag", 0.05, {}),
    "R5b": ("R5b_max_gap", 0.06, {"R5b_starts": 8}),
}


def row_of(tid: str, computed: dict) -> dict:
    """The table row of `tid` from a direct computation's numbers, through its measure, intervals and verdict."""
    t = ROWS[tid]
    assert t.measure is not None and t.intervals is not None
    return judged_row(t, t.measure({t.needs[0]: Outcome(numbers=computed)}), "", {})


def computed_numbers(tid: str, per_start: list[float]) -> dict:
    """What the computation of row `tid` saves when its starts' worst cases are `per_start`."""
    key, _, others = WORST[tid]
    worst = max(per_start)
    # R2c's measure takes the worst of the cases' `_rel_err`: one case holds the worst start
    others = {k: worst if v is None else v for k, v in others.items()}
    return others | ({} if tid == "R2c" else {key: worst}) | per_start_numbers(key, per_start)


def test_equal_starts_give_a_zero_width_interval_at_their_value() -> None:
    iv = worst_over_starts("x")({"x": 0.03, **per_start_numbers("x", [0.03] * 6)})["x"]
    assert (iv.estimate, iv.low, iv.high, iv.replicates) == (0.03, 0.03, 0.03, 6)
    assert iv.method == BOOTSTRAP.format("starts")


def test_the_bootstrap_of_a_maximum_ends_at_the_observed_maximum() -> None:
    """5 starts: a resample's maximum is <= 0.02 with probability (2/5)^5 = 0.010 < 0.025 and <= 0.03 with
    (3/5)^5 = 0.078 > 0.025, so the 2.5 % quantile is 0.03 (4000 resamples: the fractions are 0.010 ± 0.002 and
    0.078 ± 0.004, far from 0.025); the resample holds the largest start with probability 1 - (4/5)^5 = 0.67 >
    0.025, so the 97.5 % quantile is the observed maximum itself."""
    values = [0.04, 0.01, 0.2, 0.03, 0.02]
    iv = worst_over_starts("x")({"x": 0.2, **per_start_numbers("x", values)})["x"]
    assert min(values) <= iv.low <= iv.high <= max(values)
    assert iv.high == 0.2 and iv.estimate == 0.2 and iv.low == 0.03 and iv.replicates == 5


def test_starts_that_do_not_give_the_judged_number_are_refused() -> None:
    intervals = worst_over_starts("x")
    with pytest.raises(ValueError, match="largest"):  # the starts' maximum must be the judged worst case
        intervals({"x": 0.5, **per_start_numbers("x", [0.1, 0.2])})
    with pytest.raises(ValueError, match="at least 2"):  # one start: no bootstrap (the point is judged)
        intervals({"x": 0.1, **per_start_numbers("x", [0.1])})
    with pytest.raises(KeyError):  # a gap in the starts
        intervals({"x": 0.2, "x start0": 0.1, "x start2": 0.2})


@pytest.mark.parametrize("tid", sorted(WORST))
def test_each_worst_case_row_is_met_missed_or_inconclusive_by_its_interval(tid: str) -> None:
    key, bar, _ = WORST[tid]
    met = row_of(tid, computed_numbers(tid, [bar * f for f in (0.1, 0.5, 0.9, 0.3, 0.2, 0.7, 0.4, 0.6)]))
    assert met["verdict"] == MET and met["replicates"] == 8
    assert met["intervals"][key][1] == pytest.approx(0.9 * bar, rel=1e-11)  # the upper end is the worst start
    assert met["interval_method"] == BOOTSTRAP.format("starts")
    missed = row_of(tid, computed_numbers(tid, [bar * f for f in (1.5, 2.0, 1.2, 3.0, 1.1, 1.4, 2.5, 1.3)]))
    assert missed["verdict"] == MISSED and missed["intervals"][key][0] > bar
    # one start of 8 above the bar: a resample's maximum is <= 0.8 bar with probability (6/8)^8 = 0.100 > 0.025 and
    # <= 0.1 bar with (4/8)^8 = 0.004 < 0.025 (4000 resamples: s.e. 0.005 and 0.001), so the interval reaches 0.8 bar
    # and straddles the bar: one start out of 8 is not the claim failing for a typical start
    one = row_of(tid, computed_numbers(tid, [bar * f for f in (0.1, 0.8, 0.1, 0.9, 0.1, 0.8, 0.1, 2.0)]))
    assert one["verdict"] == INCONCLUSIVE and one["intervals"][key] == pytest.approx([0.8 * bar, 2 * bar], rel=1e-11)


def test_a_row_saved_without_its_starts_is_judged_as_a_point() -> None:
    row = row_of("R5b", {"R5b_max_gap": 0.04, "R5b_starts": 1})
    assert row["verdict"] == MET and row["replicates"] == 1 and row["intervals"] == {}


def _curves(drops: np.ndarray, passes: int = 12) -> np.ndarray:
    """[prompts, passes] straight lines of log10 E_first falling by log10(drop) of each prompt, offset per prompt."""
    k = np.arange(passes) / (passes - 1)
    return np.arange(len(drops))[:, None] - np.log10(drops)[:, None] * k


def test_r8_statistics_match_scipy_and_the_closed_form_drop() -> None:
    """Spearman by ranks (vectorised) equals scipy's on random curves (with a tie), and the drop of the prompts'
    mean curve is 10^(mean over prompts of their first - last)."""
    rng = np.random.default_rng(3)
    curves = rng.normal(size=(5, 4, 20))
    curves[2, :, 7] = curves[2, :, 3]  # a tie in the mean curve: average ranks, as scipy
    rho, drop = consensus_llama.collapse_stats(curves)
    m = curves.mean(1)
    assert rho == pytest.approx([spearman(np.arange(20), c) for c in m], abs=1e-12)
    assert drop == pytest.approx(10 ** (m[:, 0] - m[:, -1]), rel=1e-12)


def test_r8_bootstrap_over_prompts() -> None:
    """Equal prompts: zero-width intervals at the point values. Straight lines: the mean curve's drop is 10^(mean of
    the prompts' log10 drops), so every resample's drop lies between the smallest and largest prompt's."""
    same = np.stack([_curves(np.full(4, d)) for d in (10.0, 5.0)])  # [cases, prompts, passes]
    ivs = consensus_llama.worst_case_bootstrap(same, 0)
    assert ivs["R8_min_drop"].low == pytest.approx(5.0) and ivs["R8_min_drop"].high == pytest.approx(5.0)
    assert ivs["R8_max_spearman"].low == pytest.approx(-1.0) and ivs["R8_max_spearman"].high == pytest.approx(-1.0)
    drops = np.array([4.0, 6.0, 3.5, 9.0])
    iv = consensus_llama.worst_case_bootstrap(np.stack([_curves(drops), _curves(2 * drops)]), 0)["R8_min_drop"]
    assert iv.estimate == pytest.approx(10 ** np.log10(drops).mean())
    assert 3.5 - 1e-12 <= iv.low < iv.estimate < iv.high <= 9.0 + 1e-12 and iv.replicates == 4
    assert iv.method == BOOTSTRAP.format("prompts")


@pytest.mark.parametrize(("scale", "expected"), [(2.0, MET), (0.5, MISSED), (1.0, INCONCLUSIVE)])
def test_r8_row_follows_its_interval(monkeypatch, scale: float, expected: str) -> None:
    """Four cases of straight falls (Spearman −1); the prompts' drops 2.5, 3.2, 4 and 2.8 (times `scale`): all above
    3 after doubling (met), all below after halving (missed); as they are, the mean drop 3.08 sits on the bar and
    resamples fall on both sides of it (inconclusive)."""
    drops = scale * np.array([2.5, 3.2, 4.0, 2.8])
    cases = iter([_curves(drops), _curves(2 * drops), _curves(3 * drops), _curves(4 * drops)])
    monkeypatch.setattr(consensus_llama, "llama_stack_curves", lambda *args: next(cases))
    row = row_of("R8", consensus_llama.cons_llama_stack(0, {"passes": 12}))
    assert row["verdict"] == expected and row["replicates"] == 4
    assert set(row["intervals"]) == {"R8_max_spearman", "R8_min_drop"}
    assert row["numbers"]["R8_min_drop"] == pytest.approx(10 ** np.log10(drops).mean())
    assert row["numbers"]["R8_min_drop prompt2"] == pytest.approx(4.0 * scale)  # each prompt's own worst case
