"""S3's two ablations of the theory's U (spec §9.1, 2-path variant): what each matrix is, and that the accuracies
reported for them are those of kernel regression with the ablated U, computed here directly from the paths."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.paths.networks.kernels import scaled_paths
from attnlab.paths.tasks.data import PathData
from attnlab.paths.theory.points import ABLATIONS, ablated_U, ablations
from tests.paths.conftest import tiny

T = 0.1


def _random_U(n: int, seed: int) -> np.ndarray:
    """A PD U [n, n] with large off-diagonal entries and unequal diagonal entries."""
    A = np.random.default_rng(seed).standard_normal((n, n))
    return A @ A.T + 0.5 * np.eye(n)


def test_ablated_matrices_are_the_spec_ablations():
    U = _random_U(4, 1)
    ab = ablated_U(U)
    assert set(ab) == set(ABLATIONS)
    off = ~np.eye(4, dtype=bool)
    d, e = ab["diagonal_only"], ab["equalised_diagonal"]
    assert np.array_equal(np.diag(d), np.diag(U)) and np.all(d[off] == 0)  # off-diagonal zeroed, diagonal kept
    assert np.all(np.diag(e) == U[0, 0]) and np.array_equal(e[off], U[off])  # diagonal = U^{gg}, cross terms kept
    # each ablation is a projection: a U it leaves unchanged is a fixed point
    assert np.array_equal(ablated_U(d)["diagonal_only"], d)
    assert np.array_equal(ablated_U(e)["equalised_diagonal"], e)


def _direct_prediction(U: np.ndarray, xit: np.ndarray, xit_test: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[P1] from the scaled paths alone: K = sum U^{pp'} xi_p xi_p'^T (spec [K1], [K2]), f = k^T (K + T I)^-1 y."""
    K = np.einsum("pq,ipd,jqd->ij", U, xit, xit)
    k = np.einsum("pq,ipd,jqd->ij", U, xit_test, xit)
    return k @ np.linalg.solve(K + T * np.eye(len(y)), y)


@pytest.mark.parametrize("name", ABLATIONS)
def test_ablation_accuracy_is_kernel_regression_with_the_ablated_U(name):
    """Test labels set to the signs of the directly computed prediction of one ablation: its reported accuracy is
    then exactly 1, while the unablated U (a different predictor) does not reach 1, so a swapped or unapplied
    ablation fails."""
    net, x, y, gram = tiny(H=(2, 2), P=12, seed=3)
    x_test = torch.tensor(np.random.default_rng(4).standard_normal((200, 4, 6)))
    xit_test = scaled_paths(net.paths(x_test))
    U = _random_U(4, 2)
    f = _direct_prediction(ablated_U(U)[name], gram.xit.numpy(), xit_test.numpy(), y)
    data = PathData(net.cfg, gram, xit_test, y, np.sign(f), {}, "tiny")
    acc = ablations(data, U, T)
    assert acc[name] == 1.0
    assert acc["full"] < 1.0


def test_a_non_psd_ablation_is_reported_as_nan():
    """Equalising the diagonal to a small U^{gg} under large cross terms leaves an indefinite matrix: NaN."""
    net, x, y, gram = tiny(H=(2, 1), P=8, seed=5)
    U = np.array([[0.1, 0.9], [0.9, 2.0]])
    data = PathData(net.cfg, gram, gram.xit, y, y, {}, "tiny")
    acc = ablations(data, U, T)
    assert np.isnan(acc["equalised_diagonal"]) and np.isfinite(acc["diagonal_only"])
