"""The consensus rows R4c, R5b, R6b, R8, C-llama and B3 of `attnlab reproduce` (issue 18): each computation returns
the row's numbers, they pass the spec's threshold, and a wrong input or wrong code makes the row miss."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab.consensus.repro import checks_llama as consensus_llama
from attnlab.consensus.repro import checks_theory as consensus_checks
from attnlab.consensus.repro.targets import TARGETS
from attnlab.consensus.stats import spearman
from attnlab.reproduce.execute import Outcome, outcome, run_experiment
from attnlab.reproduce.experiments import SIZES
from attnlab.reproduce.verdict import MET, MISSED, verdict

ROWS = {t.id: t for t in TARGETS}


def judged(tid: str, numbers: dict) -> str:
    """The verdict of row `tid` on `numbers` read through its own measure (a direct computation's numbers)."""
    t = ROWS[tid]
    assert t.measure is not None
    return verdict(t.checks, t.measure({t.needs[0]: Outcome(numbers=numbers)}))[0]


def ran(name: str, tmp_path: Path, size: dict) -> dict:
    """Experiment `name` run at `size` into tmp_path, read back as the measures see it."""
    mark = run_experiment(name, tmp_path / "runs", tmp_path / "marks", 0, size)
    assert mark["error"] is None, mark["error"]
    return {name: outcome(name, tmp_path / "runs", mark, 0, size)}


def test_rows_are_measured_at_the_profiles_their_cost_allows() -> None:
    for tid in ("R4c", "R5b", "R6b", "R8", "C-llama", "B3"):
        t = ROWS[tid]
        assert t.measure is not None and (t.checks or t.shown) and not t.not_run, tid
    for name in ("cons_lag", "cons_rho_sim", "cons_sweep_integrator", "cons_llama_stack", "cons_llama_units"):
        assert name in SIZES["quick"], name
    # the tiny profile (CI) keeps the sub-second ones; R6b's two phase runs and R8's 50 passes start at quick
    assert {"cons_lag", "cons_rho_sim", "cons_llama_units"} <= set(SIZES["tiny"])
    assert "cons_b3" in SIZES["full"] and "cons_b3" not in SIZES["quick"]
    assert SIZES["quick"]["cons_rho_sim"]["starts"] == 8 and SIZES["quick"]["cons_llama_stack"]["passes"] == 50
    assert SIZES["quick"]["cons_lag"]["omegas"] == (0.005, 0.01, 0.02, 0.04)  # the spec's range of w


def test_r4c_lag_follows_the_linearised_prediction() -> None:
    """w = 0.04: the lag is w / 0.4 to 1% (the exact steady lag asin(2w/0.4)/2 is 0.7% above it), behind v_1."""
    numbers = consensus_checks.cons_lag(0, {"masks": ("full",), "omegas": (0.04,), "starts": 1})
    assert 0.0 < numbers["R4c_max_rel_err_lag"] <= 0.01
    assert numbers["R4c_max_rel_err_lag"] == pytest.approx(np.arcsin(0.2) / 0.2 - 1, abs=1e-3)
    assert numbers["R4c_max_spread_after_transient"] < 1e-10  # the tokens are at consensus
    assert judged("R4c", numbers) == MET


def test_r4c_catches_a_wrong_gap() -> None:
    """A V with gap 0.5 lags by w / 0.5: 20% off the row's prediction w / 0.4, so the row would miss."""
    lag, _ = consensus_checks.rotating_lags(0.02, "full", 1, 0, lam=(1.0, 0.5, 0.2, -0.3))
    err = float(np.abs(lag / (0.02 / 0.4) - 1).max())
    assert err == pytest.approx(0.2, abs=0.01)
    assert judged("R4c", {"R4c_max_rel_err_lag": err}) == MISSED


def test_r5b_simulation_follows_the_rho_ode_and_catches_a_clustered_start() -> None:
    g = torch.Generator().manual_seed(22)
    X0 = torch.randn(1, 32, 512, generator=g, dtype=torch.float64)
    gap = consensus_checks.rho_gap(X0, "SA", 4.0)
    assert gap == pytest.approx(0.0467, abs=1e-3)  # test_slow_theory's worst case, docs/consensus.md: 0.047
    assert judged("R5b", {"R5b_max_gap": gap}) == MET
    X0[..., 0] += 10.0  # every pair's cosine starts near 0.16, not the ODE's rho(0) = 0
    far = consensus_checks.rho_gap(X0, "SA", 1.0)
    assert far > 0.1 and judged("R5b", {"R5b_max_gap": far}) == MISSED


def test_r6b_euler_and_rk4_sweeps_and_a_perturbed_t50(tmp_path: Path) -> None:
    runs = ran("cons_sweep_integrator", tmp_path, {"starts": 8})
    t = ROWS["R6b"]
    numbers = t.measure(runs)  # type: ignore[misc]
    assert {"t50 euler beta=1", "t50 rk4 beta=5", "max_rel_diff_t50"} <= set(numbers)
    assert all(np.isfinite(v) for v in numbers.values())
    assert verdict(t.checks, numbers)[0] == MET
    sweeps = runs["cons_sweep_integrator"]
    rk4 = sweeps.runs["rk4"]
    slower = replace(rk4, summary={**rk4.summary, "t50": [1.1 * x for x in rk4.summary["t50"]]})
    bad = {"cons_sweep_integrator": replace(sweeps, runs={**sweeps.runs, "rk4": slower})}  # RK4's t50 10% later
    assert verdict(t.checks, t.measure(bad))[0] == MISSED  # type: ignore[misc]


def test_r8_one_case_collapses_and_the_row_takes_the_worst_case(monkeypatch) -> None:
    # test_random_llama_stack_collapses' case
    rho, drop = consensus_llama.llama_stack_collapse("periodic", False, 50, 0)
    assert rho <= -0.8 and drop >= 3
    # four cases of 4 equal prompts: straight falls by 10, 2 and 5 decades' worth, and a noisy rise (Spearman > -0.8)
    line = np.linspace(0, -1, 50)
    rise = 0.01 * np.arange(50) + np.random.default_rng(0).normal(0, 0.2, 50)
    cases = iter([np.tile(c, (4, 1)) for c in (line, np.log10(2) * line, np.log10(5) * line, rise)])
    monkeypatch.setattr(consensus_llama, "llama_stack_curves", lambda *args: next(cases))
    numbers = consensus_llama.cons_llama_stack(0, {"passes": 50})
    assert numbers["R8_max_spearman"] == pytest.approx(spearman(np.arange(50), rise), abs=1e-12)
    assert numbers["R8_max_spearman"] > -0.8
    assert numbers["R8_min_drop"] == pytest.approx(10 ** (rise[0] - rise[-1]))
    assert numbers["R8_drop periodic, MLP off"] == pytest.approx(2.0) and judged("R8", numbers) == MISSED


def test_c_llama_clauses_against_the_model_and_a_wrong_layer_step(monkeypatch) -> None:
    numbers = consensus_llama.cons_llama_units(0, {})
    assert judged("C-llama", numbers) == MET
    assert numbers["C-llama_random_weight_std"] == pytest.approx(0.02, abs=0.002)
    from attnlab.consensus.realmodel import StackRunner

    step = StackRunner.layer_step
    monkeypatch.setattr(StackRunner, "layer_step", lambda self, lay, h, ctx, mlp: step(self, lay, h, ctx, False))
    wrong = consensus_llama.cons_llama_units(
        0, {}
    )  # a pass that forgets the MLPs is caught against the model's forward
    assert wrong["C-llama_fp32_max_abs_err"] > 1e-3 and wrong["C-llama_fp64_max_abs_err"] > 1e-3
    assert judged("C-llama", wrong) == MISSED


def test_b3_reports_a_finished_sweep(tmp_path: Path) -> None:
    size = {"d": 16, "starts": 4, "num_betas": 3, "t_max": 5.0}
    numbers = ROWS["B3"].measure(ran("cons_b3", tmp_path, size))  # type: ignore[misc]
    assert numbers["frac_finite"] == 1.0 and numbers["phase_seconds"] > 0 and numbers["d"] == 16
    assert numbers["nominal_score_gmac"] == pytest.approx(50 * 3 * 4 * 32**2 * 16 / 1e9)
    # no bar (issue 39): reported, not counted; its old checks, which cannot fail, are shown
    assert verdict(ROWS["B3"].checks, numbers)[0] == "reported"
    assert verdict(ROWS["B3"].checks, {**numbers, "frac_finite": 0.0}, "", None, ROWS["B3"].shown)[0] == "reported"
