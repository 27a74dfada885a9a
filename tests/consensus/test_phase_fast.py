"""The phase diagram's in-place Euler path (issue 13) against the plain formulation, value for value."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.consensus import measures as M
from attnlab.consensus.dynamics import check_tokens
from attnlab.consensus.sweeps import _field_identity, phase_diagram
from attnlab.errors import NumericalError
from tests.numerics import assert_close


def plain_frac(betas, n, d, starts, t_max, h, kind, seed, dtype) -> np.ndarray:
    """The diagram as the spec writes it: every beta separately, fresh tensors each step, no retirement."""
    g = torch.Generator().manual_seed(seed)
    X0 = check_tokens(torch.randn(starts, n, d, generator=g, dtype=torch.float64)).to(dtype)
    steps = int(round(t_max / h))
    frac = np.zeros((len(betas), steps + 1))
    for i, b in enumerate(betas):
        X, beta = X0.clone(), torch.full((starts,), float(b), dtype=dtype)
        for k in range(steps + 1):
            F, G = _field_identity(X, beta, kind)
            frac[i, k] = M.clustered_fraction_from_gram(G).double().sum().item() / starts
            Y = X + h * F
            X = Y / Y.norm(dim=-1, keepdim=True)
    return frac


@pytest.mark.numerics
@pytest.mark.parametrize(
    ("kind", "dtype", "max_bytes"),
    [("SA", torch.float64, 1), ("SA", torch.float64, 64 * 2**20), ("USA", torch.float64, 2**14),
     ("SA", torch.float32, 2**14)],
)  # fmt: skip
def test_fast_euler_matches_plain_formulation_exactly(kind: str, dtype: torch.dtype, max_bytes: int) -> None:
    betas = np.array([0.5, 2.0, 4.0, 9.0])
    ref = plain_frac(betas, 12, 4, 24, 12.0, 0.1, kind, 3, dtype)
    for retire in (False, True):
        pdg = phase_diagram(
            betas, n=12, d=4, starts=24, t_max=12.0, kind=kind, seed=3, dtype=dtype, max_bytes=max_bytes, retire=retire
        )
        # bincount over starts vs a tensor sum: the same decisions, the fractions (per-start fractions in [0, 1]
        # summed over the starts in float64, then divided by their number) within (2 starts + 1)u = 5.4e-15
        # (was 1e-12)
        assert_close(pdg.frac, ref, atol=(2 * 24 + 1) * 2.0**-53, label=f"fast Euler {kind} {dtype} {max_bytes}",
                     kind="bound")  # fmt: skip
        assert pdg.frac[:, 0].max() == 0.0 and pdg.frac[0, -1] == 1.0  # real values: the small beta clusters fully
        assert 0.1 < pdg.frac[1:, -1].max() <= 1.0 and pdg.frac[-1, 60] < 0.5


def test_chunk_size_changes_nothing() -> None:
    betas = np.linspace(0.1, 9.0, 7)
    runs = [phase_diagram(betas, n=10, d=3, starts=16, t_max=8.0, max_bytes=mb).frac for mb in (1, 4096, 2**26)]
    assert np.array_equal(runs[0], runs[1]) and np.array_equal(runs[0], runs[2])


def test_non_finite_state_names_the_step() -> None:
    # float32 USA overflows exp(beta <x_i, x_j>) at beta = 200 on the first step
    with pytest.raises(NumericalError, match=r"non-finite state at t=0, h=0\.1"):
        phase_diagram(np.array([200.0]), n=6, d=3, starts=4, t_max=1.0, kind="USA", dtype=torch.float32)


def test_b2_experiment_times_on_two_threads_and_records_the_load(monkeypatch) -> None:
    """B2's experiment (issue 39): the sweep runs on two torch threads (restored afterwards), the 1-minute load at
    its start is recorded and `quiet` says whether it was below 1.5."""
    import os

    from attnlab.consensus import sweeps
    from attnlab.consensus.repro import checks_theory

    seen = []
    real = sweeps.phase_diagram
    monkeypatch.setattr(sweeps, "phase_diagram", lambda *a, **k: seen.append(torch.get_num_threads()) or real(*a, **k))
    monkeypatch.setattr(os, "getloadavg", lambda: (2.5, 0.0, 0.0))
    before = torch.get_num_threads()
    out = checks_theory.cons_b2(0, {"threads": 2, "starts": 4, "num_betas": 2, "t_max": 1.0})
    assert seen == [2] and torch.get_num_threads() == before
    assert (out["threads"], out["load_at_start"], out["quiet"], out["frac_finite"]) == (2.0, 2.5, 0.0, 1.0)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.3, 0.0, 0.0))
    assert checks_theory.cons_b2(0, {"starts": 4, "num_betas": 2, "t_max": 1.0})["quiet"] == 1.0
