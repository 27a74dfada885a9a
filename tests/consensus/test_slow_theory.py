"""Slow reproduction targets of the toy theory (spec section 7: R6a, R7b)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.consensus import measures as M
from attnlab.consensus.dynamics import AttentionSpec
from attnlab.consensus.integrators import integrate
from attnlab.consensus.schedules import Constant
from attnlab.consensus.sweeps import phase_diagram


@pytest.mark.slow
def test_phase_diagram_follows_equiangular_curve_in_high_dimension() -> None:
    """R6a: d = 128, n = 32, beta in [0.5, 5], 64 starts: t50 within 10% of t_eq(beta) (rho-ODE reaches 0.999)."""
    pdg = phase_diagram(np.linspace(0.5, 5.0, 10), n=32, d=128, starts=64, t_max=30.0)
    rel = np.abs(pdg.t50 / pdg.t_eq - 1)
    assert np.isfinite(rel).all() and rel.max() <= 0.10


@pytest.mark.slow
def test_metastable_clusters_at_large_beta() -> None:
    """R7b: d = 3, n = 32, beta = 9: mean cluster count >= 2 at t = 30, 100 and 200 and non-increasing; beta = 4
    has fewer clusters than beta = 9 at t = 30 (about sqrt(beta) clusters persist)."""
    g = torch.Generator().manual_seed(21)
    X0 = torch.randn(32, 32, 3, generator=g, dtype=torch.float64)
    counts = {}
    for beta in (4.0, 9.0):
        tr = integrate(
            X0,
            Constant(),
            AttentionSpec("SA", "full", beta),
            t_max=200.0,
            h=0.1,
            method="euler",
            measures=(),
            record_every=100,
        )
        S = torch.from_numpy(tr.states)
        counts[beta] = {float(t): float(M.cluster_count(S[:, k]).double().mean()) for k, t in enumerate(tr.t_states)}
    c9 = [counts[9.0][t] for t in (30.0, 100.0, 200.0)]
    assert min(c9) >= 2 and c9[0] >= c9[1] >= c9[2]
    assert counts[4.0][30.0] < counts[9.0][30.0]


@pytest.mark.slow
@pytest.mark.parametrize("kind,beta", [("SA", 1.0), ("SA", 4.0), ("USA", 1.0)])
def test_high_dimensional_random_start_follows_rho_ode(kind: str, beta: float) -> None:
    """R5b: d = 512, n = 32, 8 uniform starts (nearly orthogonal): sup_t |mean off-diagonal cosine - rho(t)| <= 0.06."""
    from attnlab.consensus.theory import rho_solution

    n = 32
    g = torch.Generator().manual_seed(22)
    X0 = torch.randn(8, n, 512, generator=g, dtype=torch.float64)
    tr = integrate(
        X0, Constant(), AttentionSpec(kind, "full", beta), t_max=12.0, h=0.05, method="rk4", measures=(), record_every=4
    )
    S = torch.from_numpy(tr.states)
    G = S @ S.transpose(-1, -2)
    off = (G.sum((-1, -2)) - n) / (n * (n - 1))  # [batch, records]
    rho = rho_solution(tr.t_states, beta, n, kind)
    assert np.abs(off.numpy() - rho[None]).max() <= 0.06
