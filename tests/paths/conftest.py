"""Tiny random path networks shared by the attention-paths tests (P <= 12, N0 <= 8, n_tok <= 5)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.paths.networks.architecture import HeadSpec, PathConfig, PathNetwork
from attnlab.paths.networks.kernels import PathGram, scaled_paths
from attnlab.paths.theory.action import Problem


def tiny(H=(2, 2), P=10, N0=6, n_tok=4, seed=0, readout="last"):
    """(net, x [P, n_tok, N0], y [P], gram) for random bilinear heads."""
    rng = np.random.default_rng(seed)
    layers = [[HeadSpec("bilinear", W=rng.standard_normal((N0, N0)) / 2) for _ in range(h)] for h in H]
    cfg = PathConfig(layers, tuple([5.0] * (len(H) + 1)), tuple([1.0] * (len(H) + 2)), readout)
    net = PathNetwork(cfg)
    x = torch.tensor(rng.standard_normal((P, n_tok, N0)))
    y = np.where(np.arange(P) < P // 2, 1.0, -1.0)
    gram = PathGram(scaled_paths(net.paths(x)))
    return net, x, y, gram


def problem(gram, y, H, N=5.0, T=0.1, form="chain", variances=None):
    L = len(H)
    return Problem(
        gram, torch.tensor(y), T, list(H), tuple([float(N)] * (L + 1)), tuple(variances or [1.0] * (L + 2)), form
    )


@pytest.fixture(autouse=True)
def _one_thread():
    from attnlab.core.clitools import threads

    with threads(1):
        yield
