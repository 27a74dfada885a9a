"""The authors' claims R12 (Q = K = 0, rotating V) and R13 (RMSNorm as a sphere projection): the machinery."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from attnlab.cli import main
from attnlab.consensus.dynamics import AttentionSpec, attention
from attnlab.consensus.normproj import (
    SphereNorm,
    SphereRunner,
    consensus_curves,
    fit_layers,
    fit_sphere,
    relative_error,
)
from attnlab.consensus.realmodel import StackRunner
from attnlab.consensus.repro.verdicts import run_R12, verdict_R12
from attnlab.consensus.schedules import make_schedule, rotation_generator
from tests.numerics import assert_close


def test_zero_key_query_gives_uniform_attention() -> None:
    P, V = make_schedule("constant", 4, heads=2, key_query="zero").weights(0.0)
    assert P is not None and V is None and float(P.abs().max()) == 0.0
    X = torch.nn.functional.normalize(
        torch.randn(3, 7, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64), dim=-1
    )
    for mask, kind in (("full", "SA"), ("causal", "SA"), ("full", "USA")):
        A = attention(X, P, AttentionSpec(kind, mask, torch.full((2,), 5.0)))
        n = X.shape[1]
        if mask == "full":
            # every score is exactly 0: each weight is fl(1/n), the expected value's own rounding (exact; 0 reached)
            torch.testing.assert_close(A, torch.full_like(A, 1.0 / n), rtol=0, atol=1e-15)
        else:  # causal: uniform over the keys j <= i
            expect = torch.tril(torch.ones(n, n, dtype=torch.float64)) / torch.arange(1, n + 1).double()[:, None]
            torch.testing.assert_close(A[0, 0], expect, rtol=0, atol=1e-15)


def test_rotation_value_is_skew_and_rotates_planes() -> None:
    J = rotation_generator(5)
    torch.testing.assert_close(J.T, -J)
    assert J[0, 1] == -1 and J[1, 0] == 1 and J[3, 2] == 1 and float(J[4].abs().sum()) == 0.0
    _, V = make_schedule("constant", 5, heads=3, key_query="zero", value="rotation").weights(0.0)
    assert V is not None and V.shape == (3, 5, 5)
    torch.testing.assert_close(V[2], J)


def test_R12_identity_reaches_consensus_rotation_does_not(tmp_path: Path) -> None:
    run_R12(tmp_path, n=8, d=4, batch=6, t_max=20.0)
    share, met, why = verdict_R12(tmp_path)
    assert met and share == 0.0, why
    assert (tmp_path / "R12.png").stat().st_size > 1000
    E_rot = np.load(tmp_path / "rotation" / "E.npy")
    assert float(np.median(E_rot[:, -1])) > 0.1  # far from consensus, not just slow


@pytest.mark.numerics
def test_fit_sphere_recovers_translated_scaled_sphere() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 6, generator=g, dtype=torch.float64) * 3.0
    u = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    c = torch.tensor([0.5, -1.0, 0.0, 2.0, 0.1, -0.3], dtype=torch.float64)
    y = c + 1.7 * u
    sn = fit_sphere(x, y, 1e-6)
    # an exact fit by least squares in float64 (matrix worst 4.4e-16, 2.3e+03x inside)
    assert_close(sn.s, 1.7, atol=1e-12, label="sphere fit scale", kind="observed")
    assert_close(sn.c, c, atol=1e-12, label="sphere fit centre", kind="observed")
    assert_close(relative_error(y, sn(x)), 0.0, atol=1e-12, label="sphere fit error", kind="observed")
    # unequal gains (an ellipsoid): the sphere cannot match; error = the gains' spread, by hand for u = e_1 / e_2
    gains = torch.tensor([1.0, 3.0, 1.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    flat = SphereNorm(torch.zeros(6, dtype=torch.float64), 1.0, 0.0)
    e = torch.eye(6, dtype=torch.float64)[:2] * 4.0
    r = relative_error(gains * flat(e), flat(e))
    torch.testing.assert_close(r, torch.tensor([0.0, 2.0 / 3.0], dtype=torch.float64))


def _tiny_llama(gain: float | None = None) -> LlamaForCausalLM:
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg).eval().double()
    if gain is not None:
        for lay in model.model.layers:
            lay.input_layernorm.weight.data.fill_(gain)
    return model


@pytest.mark.numerics
def test_equal_gain_norm_is_exactly_a_sphere_and_runner_matches() -> None:
    model = _tiny_llama(gain=1.3)
    ids = torch.randint(0, 97, (4, 9), generator=torch.Generator().manual_seed(1))
    norms, err = fit_layers(StackRunner(model), ids)
    # HF's RMSNorm computes in float32 even in a float64 model: agreement to float32 rounding
    # (matrix worst 6.2e-08, 16x inside)
    assert_close(err["rel_error_mean"], 0.0, atol=1e-6, label="equal gain fit error", kind="observed")
    assert_close(err["rel_error_gain_mean"], 0.0, atol=1e-6, label="equal gain gain error", kind="observed")
    for n in norms:
        assert_close(n.s, 1.3, atol=1e-6, label="equal gain scale", kind="observed")
        assert_close(n.c, 0.0, atol=1e-6, label="equal gain centre", kind="observed")
    curves = consensus_curves(model, norms, ids, passes=2, mlp=False)
    assert_close(curves["ideal"], curves["real"], rtol=1e-5, atol=1e-10, label="equal gain curves", kind="observed")


def test_unequal_gains_give_a_positive_error_and_a_different_iteration() -> None:
    model = _tiny_llama()
    with torch.no_grad():
        for lay in model.model.layers:
            lay.input_layernorm.weight.copy_(torch.linspace(0.2, 3.0, 32, dtype=torch.float64))
    ids = torch.randint(0, 97, (4, 9), generator=torch.Generator().manual_seed(1))
    norms, err = fit_layers(StackRunner(model), ids)
    assert min(err["rel_error_mean"]) > 0.05
    h = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    layer = model.model.layers[0]
    runner, plain = SphereRunner(model, norms), StackRunner(model)
    _, ctx = runner.prepare(ids[:2])
    ideal = runner.layer_step(layer, h, ctx, False)
    _, plain_ctx = plain.prepare(ids[:2])
    assert not torch.allclose(ideal, plain.layer_step(layer, h, plain_ctx, False))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["norm", "--passes", "1"], "passes must be an integer >= 2, got 1"),
        (["norm", "--prompts", "1"], "prompts per domain (half fit the sphere, half measure it) must be an integer"),
        (["norm", "--domains", "poetry"], "unknown domain 'poetry'; valid: prose, code, random"),
        (["norm", "--fall", "-1"], "fall must be in [0, 300] decades, got -1.0"),
        (["simulate", "--value", "spin"], "unknown value matrix 'spin'; valid: identity, random, rotation"),
        (["simulate", "--key-query", "one"], "unknown random ensemble 'one'; valid: identity, gaussian, goe, zero"),
    ],
)
def test_bad_input_one_line_and_earlier_files_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str], message: str
) -> None:
    keep = tmp_path / "earlier.txt"
    keep.write_text("x")
    before = (keep.read_bytes(), keep.stat().st_mtime_ns)
    out = tmp_path / "x"
    assert main(["consensus", *argv, "--out", str(out)]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("attnlab: error: " + message), err
    assert not out.exists() and (keep.read_bytes(), keep.stat().st_mtime_ns) == before


def test_verdict_R13_reads_saved_metrics(tmp_path: Path) -> None:
    import json

    from attnlab.consensus.repro.verdicts import verdict_R13

    m = {"rel_error_mean": [0.05, 0.08], "same_conclusion": True, "fall_real": 0.7, "fall_ideal": 0.8, "passes": 10}
    (tmp_path / "metrics.json").write_text(json.dumps(m))
    assert verdict_R13(tmp_path)[:2] == (0.08, True)
    (tmp_path / "metrics.json").write_text(json.dumps(m | {"rel_error_mean": [0.05, 0.3]}))
    assert verdict_R13(tmp_path)[:2] == (0.3, False)


def _rst_run(tmp_path: Path, finals: dict[str, np.ndarray]) -> dict:
    """A `consensus model` run as R10's measure reads it: group summaries (CI bands, roughness) and curves.npz."""
    from types import SimpleNamespace

    from attnlab.consensus.arrays import save_npz
    from attnlab.reproduce.execute import Outcome

    rough = {"constant": 0.0, "periodic": 0.5, "random": 1.4}
    groups, curves = {}, {}
    for g, final in finals.items():
        m = float(np.log10(final).mean())
        groups[g] = {"final_band_log10": {"mean_log10": m, "lo_log10": m - 0.1, "hi_log10": m + 0.1},
                     "roughness_attn": rough[g.split(",")[0]], "roughness_block": 1.0}  # fmt: skip
        curves[f"{g}|E_first"] = np.stack([np.ones_like(final), final], 1)  # [prompt, steps + 1]
    save_npz(tmp_path / "curves.npz", **curves)
    run = SimpleNamespace(summary={"groups": groups}, path=str(tmp_path))
    return {"cons_rst": Outcome(runs={"": run})}  # type: ignore[dict-item]


def _finals_by_roughness() -> dict[str, np.ndarray]:
    """Final E_first per prompt (3 prompts, offsets 0, 0.3, −0.2 decades) of each schedule with roughness r:
    10^(−4 + 2r) with MLPs off, 10^(−4 − r) with MLPs on."""
    offsets, finals = np.array([0.0, 0.3, -0.2]), {}
    for s, r in (("constant", 0.0), ("periodic", 0.5), ("random", 1.4)):
        finals[f"{s}, MLP off"] = 10.0 ** (-4 + 2 * r + offsets)
        finals[f"{s}, MLP on"] = 10.0 ** (-4 - r + offsets)
    return finals


def test_r10_reports_the_slope_against_roughness(tmp_path: Path) -> None:
    """R10's slope vs roughness: final log10 E_first = −4 + 2 r per prompt (MLPs off) gives slope 2 with the
    interval [2, 2]; MLPs on, E falling with roughness gives a negative slope; the schedules' roughness is shown."""
    from attnlab.consensus.repro.measures import c_r10

    out = c_r10(_rst_run(tmp_path, _finals_by_roughness()))
    assert out["slope_vs_roughness_off"] == pytest.approx(2.0, abs=1e-12)
    assert (out["slope_vs_roughness_off_low"], out["slope_vs_roughness_off_high"]) == (
        pytest.approx(2.0, abs=1e-12), pytest.approx(2.0, abs=1e-12))  # fmt: skip
    assert out["slope_vs_roughness_on"] == pytest.approx(-1.0, abs=1e-12)
    assert out["roughness random"] == 1.4 and out["ci_gap_off_constant_periodic"] == pytest.approx(0.8)


def test_r9_bootstraps_the_smallest_fall_and_largest_spearman_over_prompts() -> None:
    """Every prompt falls by exactly 2 decades (MLP off) or 1 (MLP on) along a straight line: each resample's
    smallest fall is 1 and its largest Spearman −1, so both intervals are points; an offset per prompt changes
    neither (it cancels in the fall and does not reorder a mean curve)."""
    from attnlab.consensus.repro.measures import _r9_bootstrap

    L, offsets = 2, np.array([0.0, 0.4, -0.3, 1.1])
    passes = np.arange(4)  # pass ends at steps 2, 4, 6, 8 of 9 states
    E = {}
    for mlp, slope in (("off", 2 / 3), ("on", 1 / 3)):
        logE = -1.0 - slope * passes[None, :] + offsets[:, None]  # [prompt, pass]
        full = np.ones((4, 9))
        full[:, L::L] = 10.0**logE
        E[mlp] = full
    out = _r9_bootstrap(E, L)
    assert (out["min_fall_decades_low"], out["min_fall_decades_high"]) == (pytest.approx(1.0), pytest.approx(1.0))
    assert (out["max_spearman_low"], out["max_spearman_high"]) == (pytest.approx(-1.0), pytest.approx(-1.0))
    assert out["R9_prompts"] == 4


def test_r10_judges_the_spec_rule_as_an_interval_and_shows_the_paired_bootstrap(tmp_path: Path) -> None:
    """Each schedule's CI is its mean ± 0.1 (`_rst_run`), so the judged interval of a gap g is [g − 0.2, g + 0.2]:
    MLP off, constant → periodic (g = 1) is met; MLP on, periodic → random (g = −0.9) is missed; a gap of 0.1 would
    overlap (inconclusive). The per-prompt offsets cancel in the paired differences: the paired interval is [g, g]."""
    from attnlab.consensus.repro.measures import c_r10
    from attnlab.consensus.repro.targets import r10_intervals
    from attnlab.reproduce.verdict import verdict

    out = c_r10(_rst_run(tmp_path, _finals_by_roughness()))
    ivs = r10_intervals(out)
    assert [ivs["mean_gap_off_constant_periodic"].low, ivs["mean_gap_off_constant_periodic"].high] == [
        pytest.approx(0.8), pytest.approx(1.2)]  # fmt: skip
    assert ivs["mean_gap_on_periodic_random"].high == pytest.approx(-0.7)
    assert out["mean_gap_on_periodic_random_paired_low"] == pytest.approx(-0.9)
    assert out["mean_gap_on_periodic_random_paired_high"] == pytest.approx(-0.9)
    from attnlab.reproduce.targets import TARGETS

    t10 = next(t for t in TARGETS if (t.study, t.id) == ("consensus", "R10"))
    v, why = verdict(t10.checks, out, "", ivs)
    assert v == "missed" and "mean_gap_off_constant_periodic > 0: 1 [0.8, 1.2] met" in why
    close = out | {"mean_gap_off_constant_periodic": 0.1, "ci_gap_off_constant_periodic": -0.1,
                   "ci_span_off_constant_periodic": 0.3}  # fmt: skip
    assert "mean_gap_off_constant_periodic > 0: 0.1 [-0.1, 0.3] inconclusive" in verdict(
        t10.checks, close, "", r10_intervals(close))[1]  # fmt: skip
