"""Issue 39, "MCSE for samplers": the 95 % intervals of the sampler rows S6 and SC-H1 on constructed cases with
known answers, and the verdicts that follow from them (met / missed / inconclusive). Each test fails if its rule is
broken: the delta-method MCSE of a relative Frobenius error (closed forms, and a Monte-Carlo check), S6's error
judged by ± 1.96 MCSE, SC-H1's |a|/SE by ± 1.96 in SE units and e(64) by its MCSE where the run saved it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from attnlab.core.intervals import MCSE, mcse_interval
from attnlab.paths.repro import checks_full_profile as full
from attnlab.paths.repro import measures as r
from attnlab.paths.repro.targets import TARGETS
from attnlab.paths.sampling.diagnostics import rel_frob_err_mcse
from attnlab.reproduce.run import judged_row
from attnlab.reproduce.verdict import INCONCLUSIVE, MET, MISSED, SINGLE, verdict

ROWS = {t.id: t for t in TARGETS}
Z95 = 1.959963984540054  # the normal 97.5 % quantile


# --- the MCSE of e = |U_hat - U| / |U| --------------------------------------------------------------------------
def test_rel_frob_mcse_closed_forms() -> None:
    """U = I_2. A diagonal offset d: e = d/sqrt(2), de/dU_00 = 1/sqrt(2), so MCSE = s_00/sqrt(2). A symmetric
    off-diagonal offset d: e = sqrt(2)|d|/sqrt(2) = |d|, de/dU_01 = 1, so MCSE = s_01 (both symmetric entries move
    together: s_01/sqrt(2) if the doubling were forgotten). At U_hat = U: sqrt(sum s^2)/|U|."""
    eye, mc = np.eye(2), np.array([[0.03, 0.02], [0.02, 0.05]])
    assert rel_frob_err_mcse(eye + np.diag([0.4, 0.0]), mc, eye) == pytest.approx(0.03 / math.sqrt(2), rel=1e-12)
    assert rel_frob_err_mcse(eye + 0.4 * (1 - eye), mc, eye) == pytest.approx(0.02, rel=1e-12)
    assert rel_frob_err_mcse(eye, mc, eye) == pytest.approx(np.linalg.norm(mc) / math.sqrt(2), rel=1e-12)
    with pytest.raises(ValueError, match="one \\[n, n\\] shape"):
        rel_frob_err_mcse(eye, mc[:1], eye)


def test_rel_frob_mcse_matches_the_spread_of_e_over_draws() -> None:
    """Independent Gaussian errors on the upper triangle of a symmetric U_hat (sd = its MCSE): the sd of e over
    20,000 draws agrees with the delta method. Tolerance 3 %: the sd's own sampling error is 1/sqrt(2 * 20000) =
    0.5 % (6 of them), and the noise is 1 % of |U_hat - U|, so the delta method's second-order term is ~1e-4."""
    rng = np.random.default_rng(3)
    n = 5
    U = np.eye(n) * 2 + 0.1 * rng.standard_normal((n, n))
    U = (U + U.T) / 2
    mu = U + 0.3 * (lambda a: (a + a.T) / 2)(rng.standard_normal((n, n)))
    mc = 0.01 * np.abs(np.linalg.norm(mu - U)) / n * (1 + rng.random((n, n)))
    mc = np.triu(mc) + np.triu(mc, 1).T
    iu = np.triu_indices(n)
    eps = np.zeros((20000, n, n))
    eps[:, iu[0], iu[1]] = rng.standard_normal((20000, iu[0].size)) * mc[iu]
    eps = eps + np.triu(eps, 1).transpose(0, 2, 1)  # symmetric: the lower triangle is the upper one
    e = np.linalg.norm(mu + eps - U, axis=(1, 2)) / np.linalg.norm(U)
    assert float(e.std(ddof=1)) == pytest.approx(rel_frob_err_mcse(mu, mc, U), rel=0.03)


# --- S6 ----------------------------------------------------------------------------------------------------------
def _s6_numbers(err: float, mcse: float) -> dict:
    return {"sampled_vs_theory_err": err, "sampled_vs_theory_mcse": mcse, "sampled_draws": 8000.0,
            "offdiag_small_alpha": 0.035, "offdiag_growth": 22.8, "sampler_converged": 1.0}  # fmt: skip


@pytest.mark.parametrize(("err", "expected"), [(0.05, MET), (0.095, INCONCLUSIVE), (0.13, MISSED)])
def test_s6_error_is_judged_by_its_mcse_interval(err: float, expected: str) -> None:
    """Bar e <= 0.1, MCSE 0.01: 0.05 ± 0.0196 clears it, 0.095 ± 0.0196 straddles it (its point alone would meet
    it), 0.13 ± 0.0196 lies above it."""
    t, numbers = ROWS["S6"], _s6_numbers(err, 0.01)
    iv = t.intervals(numbers)["sampled_vs_theory_err"]  # type: ignore[misc]
    assert (iv.low, iv.high) == pytest.approx((err - Z95 * 0.01, err + Z95 * 0.01), rel=1e-12)
    assert iv.method == MCSE and iv.replicates == 8000
    row = judged_row(t, numbers, "", {})
    assert row["verdict"] == expected and row["interval_method"] == MCSE and row["replicates"] == 8000
    # the theory's fractions and the gate are exact: their points are their intervals, and the row says why
    assert set(row["exact"]) == {"offdiag_small_alpha", "offdiag_growth", "sampler_converged"}
    assert row["intervals"]["offdiag_growth"] == [22.8, 22.8]


def test_s6_gate_and_fractions_are_judged_as_they_are() -> None:
    t = ROWS["S6"]
    for bad in ({"sampler_converged": 0.0}, {"offdiag_growth": 2.0}, {"offdiag_small_alpha": 0.2}):
        numbers = _s6_numbers(0.03, 0.002) | bad
        assert verdict(t.checks, numbers, "", t.intervals(numbers))[0] == MISSED  # type: ignore[misc]


def _sample_folder(f: Path, with_mcse: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A `paths_layers` folder: its sweep's points and a sample run's metrics.json and U.npy (U_hat, U_mcse only
    `with_mcse`, as a run of `paths sample` saves them)."""
    U = np.diag([2.0, 1.5, 1.0]) + 0.1
    Uh, mc = U + 0.05 * np.eye(3), np.full((3, 3), 0.004)
    (f / "sweep").mkdir(parents=True)
    pts = [{"alpha": 0.1, "U": (np.eye(3) + 0.01).tolist()}, {"alpha": 10.0, "U": np.ones((3, 3)).tolist()}]
    (f / "sweep" / "points.jsonl").write_text("\n".join(json.dumps(p) for p in pts) + "\n")
    (f / "sample").mkdir()
    m = {"rel_frob_err": float(np.linalg.norm(Uh - U) / np.linalg.norm(U)), "converged": True, "N": 10,
         "alpha": 4.0, "rhat_max": 1.004, "draws": 1000, "draws_used": 2000, "tries": 2, "chains": 4}  # fmt: skip
    if with_mcse:
        m |= {"U_hat": Uh.tolist(), "U_mcse": mc.tolist()}
    (f / "sample" / "metrics.json").write_text(json.dumps(m))
    np.save(f / "sample" / "U.npy", U)
    return U, Uh, mc


def test_s6_reads_its_mcse_from_the_run_folder(tmp_path: Path) -> None:
    """The run folder's U_hat, U_mcse (metrics.json) and U.npy give the MCSE; the kept draws are chains x the last
    try's draws. A folder without them has no interval: the point is judged, and the row says it is one run."""
    U, Uh, mc = _sample_folder(tmp_path / "new", True)
    n = r.p_s6({"paths_layers": tmp_path / "new"})
    assert n["sampled_vs_theory_mcse"] == pytest.approx(rel_frob_err_mcse(Uh, mc, U), rel=1e-12)
    assert n["sampled_draws"] == 8000 and n["sampler_tries"] == 2
    row = judged_row(ROWS["S6"], n, "", {})
    assert row["verdict"] == MET and row["intervals"]["sampled_vs_theory_err"][1] < 0.1
    _sample_folder(tmp_path / "old", False)
    old = r.p_s6({"paths_layers": tmp_path / "old"})
    assert math.isnan(old["sampled_vs_theory_mcse"])
    row = judged_row(ROWS["S6"], old, "", {})
    assert row["interval_method"] == SINGLE and row["verdict"] == MET


# --- SC-H1 -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("z", "low", "expected"), [(0.5, 0.0, MET), (2.0, 2.0 - Z95, INCONCLUSIVE), (31.5, 31.5 - Z95, MISSED)]
)
def test_a_over_se_is_judged_by_its_interval_in_se_units(z: float, low: float, expected: str) -> None:
    """|a|/SE ± 1.96 for the entry attaining the max, never below 0 (|a| >= 0): against the bar 3, 0.5 -> [0,
    2.46] met, 2.0 -> [0.04, 3.96] inconclusive (its point alone would meet it), 31.5 -> [29.5, 33.5] missed. Without
    e(64)'s MCSE, e(64) is judged as its point (here 0.03 <= 0.05, met)."""
    t = ROWS["SC-H1"]
    numbers = {"simple_max_a_over_se_H1": z, "simple_e_N64_max_H1": 0.03}
    ivs = t.intervals(numbers)  # type: ignore[misc]
    assert set(ivs) == {"simple_max_a_over_se_H1"}
    iv = ivs["simple_max_a_over_se_H1"]
    assert (iv.low, iv.high) == pytest.approx((low, z + Z95), rel=1e-12) and iv.replicates == r.ADJ_KEPT_DRAWS
    assert iv.method == r.A_OVER_SE
    assert verdict(t.checks, numbers, "", ivs)[0] == expected


@pytest.mark.parametrize(("e", "expected"), [(0.03, MET), (0.045, INCONCLUSIVE), (2.48, MISSED)])
def test_e_at_64_is_judged_by_its_mcse_where_saved(e: float, expected: str) -> None:
    """e(64) ± 1.96 MCSE (0.005) against 0.05, with |a|/SE clear (0.5); the kept draws are the replicates."""
    t = ROWS["SC-H1"]
    numbers = {"simple_max_a_over_se_H1": 0.5, "simple_e_N64_max_H1": e, "simple_e_N64_mcse_H1": 0.005,
               "kept_draws_min": 16000.0}  # fmt: skip
    ivs = t.intervals(numbers)  # type: ignore[misc]
    assert ivs["simple_e_N64_max_H1"] == mcse_interval(e, 0.005, 16000)
    row = judged_row(t, numbers, "", {})
    assert row["verdict"] == expected and row["replicates"] == 16000
    assert row["interval_method"] == "; ".join(sorted({MCSE, r.A_OVER_SE}))


def test_no_fit_has_no_interval_and_misses() -> None:
    t = ROWS["SC-H1"]
    numbers = {"simple_max_a_over_se_H1": math.nan, "simple_e_N64_max_H1": math.nan, "simple_e_N64_mcse_H1": 0.01}
    assert t.intervals(numbers) == {}  # type: ignore[misc]
    assert judged_row(t, numbers, "", {})["verdict"] == MISSED


def _points(config: str, e64: dict[float, float], s: float = 0.5) -> list[dict]:
    """§10 points of `config` at alphas 1 and 4 (N = 8 ... 64): the simple form's U is U_hat scaled by 1 - e, e
    from `e64` at N = 64 (0.5 at the other widths); U_mcse 0.004 everywhere; 2000 draws per chain (4000 at 64)."""
    pts = []
    for a in (1.0, 4.0):
        for N in (8, 16, 32, 64):
            Uh, mc = np.eye(2) * 1.5, np.full((2, 2), 0.004)
            e = e64[a] if N == 64 else 0.5
            Us = Uh * (1 - e)  # e_simple = e / (1 - e): grows with e
            pts.append({"config": config, "alpha": a, "N": N, "T": 0.1, "s": s, "U_hat": Uh, "U_mcse": mc,
                        "U_simple": Us, "U_chain": Uh, "e_simple": float(np.linalg.norm(Uh - Us) / np.linalg.norm(Us)),
                        "e_chain": 0.0, "draws_used": 2000 if N < 64 else 4000, "tries": 1, "rhat_max": 1.0,
                        "ess_bulk_min": 900.0})  # fmt: skip
    return pts


def test_the_adjudication_saves_the_mcse_of_e_at_64_and_the_kept_draws() -> None:
    """Each configuration's numbers carry the MCSE of e_simple at N = 64 at the alpha attaining its max (alpha 4
    here); NaN when the s >= 0.10 filter removes N = 64; the fewest kept draws are 4 chains x 2000."""
    pts = _points("C1", {1.0: 0.1, 4.0: 0.3})
    nums = full._config_numbers(pts, "C1", (1.0, 4.0))
    at = next(p for p in pts if p["alpha"] == 4.0 and p["N"] == 64)
    assert nums["simple_e_N64_C1"] == pytest.approx(at["e_simple"], rel=1e-12)
    assert nums["simple_e_N64_mcse_C1"] == pytest.approx(
        rel_frob_err_mcse(at["U_hat"], at["U_mcse"], at["U_simple"]), rel=1e-12
    )
    assert full._gate_numbers(pts)["kept_draws_min"] == 4 * 2000
    filtered = [p | {"s": 0.05} if p["N"] == 64 and p["alpha"] == 1.0 else p for p in pts]
    assert math.isnan(full._config_numbers(filtered, "C1", (1.0, 4.0))["simple_e_N64_mcse_C1"])


def test_sc_h1_takes_the_mcse_of_the_configuration_attaining_the_max() -> None:
    """combine_adjudication: e(64) is C2's (the larger), so its MCSE is C2's, not C1's; the kept draws are the
    smallest over the configurations; SC-H1's measure keeps both (older numbers without them: neither)."""
    c1 = {"simple_max_a_over_se_C1": 1.0, "simple_e_N64_C1": 0.39, "simple_e_N64_mcse_C1": 0.01,
          "kept_draws_min": 8000.0}  # fmt: skip
    c2 = {"simple_max_a_over_se_C2": 31.5, "simple_e_N64_C2": 2.48, "simple_e_N64_mcse_C2": 0.05,
          "kept_draws_min": 16000.0}  # fmt: skip
    gate = {k: 0.0 for k in ("points", "points_failing_rhat_1.01", "points_failing_ess_400", "points_counted_s_0.10",
                             "draws_doubled_points")}  # fmt: skip
    parts = [p | gate | {"rhat_max": 1.0, "ess_bulk_min": 900.0} | {f"{f}_{k}_{c}": 0.0 for f in ("chain", "simple")
             for k in ("supported", "rejected") for c in ("C1", "C2")} for p in (c1, c2)]  # fmt: skip
    out = r.combine_adjudication(parts, ("C1", "C2"))
    assert out["simple_e_N64_max_H1"] == 2.48 and out["simple_e_N64_mcse_H1"] == 0.05
    assert out["kept_draws_min"] == 8000
    old = [{k: v for k, v in p.items() if k not in ("kept_draws_min",) and "mcse" not in k} for p in parts]
    out = r.combine_adjudication(old, ("C1", "C2"))
    assert math.isnan(out["simple_e_N64_mcse_H1"]) and math.isnan(out["kept_draws_min"])
