"""Measure identities (spec section 6) and one-line bad-input errors (spec section 9)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlab.consensus import measures as M
from attnlab.consensus.dynamics import AttentionSpec, check_tokens, check_weights
from attnlab.consensus.integrators import integrate
from attnlab.consensus.schedules import Constant, RandomSchedule, make_schedule
from attnlab.errors import InputError, NumericalError
from tests.numerics import assert_close


@pytest.mark.numerics
def test_consensus_and_orthonormal_identities() -> None:
    x = torch.tensor([0.3, -0.2, 0.9], dtype=torch.float64)
    X = x.repeat(1, 5, 1)
    for name in ("E_first", "E_pair", "max_gap"):
        assert abs(float(M.compute([name], X)[name])) < 1e-15  # identical tokens: every difference is exactly 0
    # eigenvalues of a rank-one Gram matrix through LAPACK (matrix worst 8.9e-16, 1.1e+03x inside)
    assert_close(float(M.top_share(X)), 1.0, atol=1e-12, label="top share of one point", kind="observed")
    assert_close(float(M.participation_ratio(X)), 1.0, atol=1e-12, label="participation of one point", kind="observed")
    assert int(M.cluster_count(X)) == 1 and float(M.clustered_fraction(X)) == 1.0
    Q = torch.eye(6, dtype=torch.float64)[:4].unsqueeze(0)  # 4 orthonormal tokens in R^6
    assert_close(
        float(M.participation_ratio(Q)), 4.0, atol=1e-12, label="participation of 4 orthonormal", kind="observed"
    )
    assert_close(float(M.top_share(Q)), 0.25, atol=1e-12, label="top share of 4 orthonormal", kind="observed")


def test_planted_clusters_and_antipodal_pair() -> None:
    g = torch.Generator().manual_seed(0)
    centres = torch.eye(5, dtype=torch.float64)[:3]
    X = centres.repeat_interleave(4, 0) + 1e-4 * torch.randn(12, 5, generator=g, dtype=torch.float64)
    assert int(M.cluster_count(X.unsqueeze(0))) == 3
    pair = torch.tensor([[[1.0, 0.0], [-1.0, 0.0]]], dtype=torch.float64)
    assert abs(float(M.E_first(pair)) - 1) < 1e-15  # +-1 and 0 entries: every operation is exact
    assert abs(float(M.max_gap(pair)) - 2) < 1e-15


@pytest.mark.numerics
def test_rotation_invariance() -> None:
    g = torch.Generator().manual_seed(1)
    X = torch.randn(3, 7, 4, generator=g, dtype=torch.float64)
    R, _ = torch.linalg.qr(torch.randn(4, 4, generator=g, dtype=torch.float64))
    names = (
        "E_first",
        "E_pair",
        "max_gap",
        "clustered_fraction",
        "cluster_count",
        "top_share",
        "participation_ratio",
        "energy",
    )
    a, b = M.compute(names, X), M.compute(names, X @ R.T)
    for name in names:
        # X against X R^T: the rotation's rounding (a few u) through each measure (matrix worst 4.4e-15,
        # 2.3e+02x inside)
        assert_close(a[name].double(), b[name].double(), atol=1e-12, label=f"rotation {name}", kind="observed")


def test_hemisphere_lp() -> None:
    inside = torch.tensor([[[1.0, 0.2, 0.0], [0.8, -0.5, 0.1], [0.3, 0.0, 0.9]]], dtype=torch.float64)
    spread = torch.tensor([[[1.0, 0, 0], [-1.0, 0, 0], [0, 1.0, 0], [0, -1.0, 0]]], dtype=torch.float64)
    m_in, _ = M.hemisphere_lp(inside)
    m_out, _ = M.hemisphere_lp(spread)
    assert m_in[0] > 0.1 and m_out[0] == 0.0
    assert float(M.hemisphere_margin(inside)) > 0


def _randn(*shape: int) -> torch.Tensor:
    """Seeded Gaussian tokens (float64): tests never draw from torch's global generator."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(11), dtype=torch.float64)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_zero_vector_rejected() -> None:
    X = _randn(2, 4, 3)
    X[1, 2] = 0
    with pytest.raises(InputError) as exc:
        check_tokens(X)
    assert "zero token vector" in _one_line(exc) and "batch 1, token 2" in str(exc.value)
    with pytest.raises(InputError) as exc:
        M.E_first(X)
    assert "batch 1, token 2" in _one_line(exc)


def test_non_finite_weights_rejected() -> None:
    P = torch.zeros(2, 3, 3, dtype=torch.float64)
    P[1, 0, 0] = math.nan
    with pytest.raises(InputError) as exc:
        check_weights(P, "P", 3)
    assert "non-finite value (NaN/Inf) in P at head 1" == _one_line(exc)


def test_non_finite_schedule_draw_rejected() -> None:
    with pytest.raises(InputError) as exc:
        RandomSchedule(d=3, sigma=math.inf)
    assert "sigma must be finite" in _one_line(exc)
    V = torch.full((1, 3, 3), math.inf, dtype=torch.float64)
    with pytest.raises(InputError) as exc:
        integrate(_randn(1, 4, 3), Constant(None, V), AttentionSpec("SA", "full", 1.0), 1.0, 0.1)
    assert "non-finite value (NaN/Inf) in V (constant schedule at t=0) at head 0" == _one_line(exc)


def test_step_size_blowup_detected() -> None:
    X = _randn(2, 6, 3)
    with pytest.warns(UserWarning, match="step bound"):
        with pytest.raises(NumericalError) as exc:
            integrate(
                X,
                Constant(None, 5 * torch.eye(3, dtype=torch.float64).unsqueeze(0)),
                AttentionSpec("SA", "full", 1.0),
                10.0,
                1.0,
                "rk4",
            )
    msg = _one_line(exc)
    assert msg.startswith("step size too large") and "try h <=" in msg
    with pytest.warns(UserWarning):
        tr = integrate(
            X,
            Constant(None, 5 * torch.eye(3, dtype=torch.float64).unsqueeze(0)),
            AttentionSpec("SA", "full", 1.0),
            10.0,
            1.0,
            "rk4",
            stop_on_error=True,
        )
    assert tr.stopped is not None and tr.t[-1] < 10.0


@pytest.mark.parametrize("n,d", [(1, 3), (4, 1)])
def test_small_sizes_rejected(n: int, d: int) -> None:
    with pytest.raises(InputError) as exc:
        check_tokens(torch.ones(1, n, d))
    assert "need n >= 2 tokens and d >= 2" in _one_line(exc)


def test_unknown_names_rejected() -> None:
    with pytest.raises(InputError) as exc:
        make_schedule("periodc", d=3)
    assert _one_line(exc) == (
        "unknown schedule 'periodc'; valid: constant, periodic, cycle, random (did you mean 'periodic'?)"
    )
    with pytest.raises(InputError) as exc:
        AttentionSpec("SA", "casual", 1.0)
    assert "did you mean 'causal'" in _one_line(exc)
    with pytest.raises(InputError) as exc:
        integrate(_randn(1, 3, 3), Constant(), AttentionSpec("SA", "full", 1.0), 1.0, 0.1, "rk5")
    assert "unknown integrator 'rk5'" in _one_line(exc)


def test_delta_must_be_multiple_of_h_and_usa_overflow() -> None:
    with pytest.raises(InputError) as exc:
        integrate(_randn(1, 3, 3), make_schedule("random", d=3, delta=0.25), AttentionSpec("SA", "full", 1.0), 1.0, 0.1)
    assert "multiple of the step" in _one_line(exc)
    with pytest.raises(InputError) as exc:
        integrate(_randn(1, 3, 3), Constant(), AttentionSpec("USA", "full", 800.0), 1.0, 0.1)
    assert "would overflow float64" in _one_line(exc)


def test_random_schedule_is_pure_function_of_seed_and_interval() -> None:
    a, b = RandomSchedule(d=4, seed=3), RandomSchedule(d=4, seed=3)
    assert torch.equal(a.weights(2.5)[0], b.weights(2.7)[0])
    assert not torch.equal(a.weights(2.5)[0], a.weights(3.5)[0])
    from attnlab.consensus.schedules import roughness

    assert roughness(Constant(torch.eye(3).double().unsqueeze(0)), 5) == 0.0
    assert abs(roughness(RandomSchedule(d=32, heads=4, seed=0), 40.0) - math.sqrt(2)) < 0.05
    assert np.isfinite(roughness(make_schedule("periodic", d=4), 10.0))


def test_roughness_slope_exact_line_and_pooled_fit() -> None:
    """R10's slope: a per-prompt offset shared by every schedule leaves the slope exact in every bootstrap resample
    (interval [b, b] to round-off); with noise it equals np.polyfit of the pooled points (equal prompts per
    schedule), and the interval contains it."""
    from attnlab.consensus.stats import roughness_slope

    r = np.array([0.0, 0.3, 1.41])
    offset = np.random.default_rng(1).normal(size=9)
    slope, low, high = roughness_slope(2.0 + 3.0 * r[:, None] + offset[None, :], r)
    assert slope == pytest.approx(3.0, abs=1e-12) and low == pytest.approx(3.0, abs=1e-12)
    assert high == pytest.approx(3.0, abs=1e-12)
    y = np.random.default_rng(2).normal(size=(3, 9)) + r[:, None]
    slope, low, high = roughness_slope(y, r)
    assert slope == pytest.approx(np.polyfit(np.repeat(r, 9), y.ravel(), 1)[0], rel=1e-12)
    assert low < slope < high
    with pytest.raises(ValueError):
        roughness_slope(y, np.zeros(3))
