"""Sampler and diagnostics (spec §7; tests T12, T13, T14, T17)."""

import numpy as np
import pytest
import torch

from attnlab.paths.repro.checks_sampling import ar1_chains as _ar1  # T12's chains, as the reproduce row draws them
from attnlab.paths.sampling.diagnostics import ess, ess_bulk, rhat, summarize
from attnlab.paths.sampling.sampler import CollapsedTarget, sample_chains
from tests.numerics import assert_close
from tests.paths.conftest import tiny


def test_ess_of_ar1_and_rhat_of_shifted_chains():  # T12
    for rho in [0.0, 0.5, 0.9]:
        x = _ar1(rho, 4000, 4, seed=1)
        expect = x.size * (1 - rho) / (1 + rho)
        assert abs(ess(x) - expect) < 0.15 * expect
        assert abs(ess_bulk(x) - expect) < 0.15 * expect
    x = _ar1(0.5, 1000, 4, seed=2)
    assert rhat(x) < 1.01
    x[0] += 2.0
    assert rhat(x) > 1.1


# the correlated Gaussian with the sampler's target interface: the one reproduce's T13 row samples
from attnlab.paths.repro.checks_sampling import GaussianTarget as _Gauss  # noqa: E402


@pytest.mark.parametrize("kind,draws", [("hmc", 800), ("mala", 2000)])
def test_hmc_and_mala_recover_gaussian_moments(kind, draws):  # T13
    tgt = _Gauss()
    res = sample_chains(tgt, chains=4, warmup=400, draws=draws, n_leapfrog=8, kind=kind, seed=3, progress=False)
    x = res.U[:, :, 0, :]  # [C, n, d]
    s = summarize(x)
    assert np.all(np.abs(s["mean"] - tgt.mu.numpy()) < 5 * s["mcse"])
    # second moments: E[(x_i - mu_i)(x_j - mu_j)] for a few pairs, with their own MCSE
    z = x - tgt.mu.numpy()
    pairs = [(0, 0), (0, 1), (3, 7), (5, 5), (10, 19)]
    prod = np.stack([z[..., i] * z[..., j] for i, j in pairs], -1)
    sp = summarize(prod)
    ref = np.array([float(tgt.cov[i, j]) for i, j in pairs])
    assert np.all(np.abs(sp["mean"] - ref) < 5 * sp["mcse"])


def test_prior_only_sampling_gives_sigma2_identity():  # T14
    net, x, y, gram = tiny((2, 2), P=6)
    cfg = net.cfg.with_widths(4)
    tgt = CollapsedTarget(cfg, gram, y, 0.1, prior_only=True)
    res = sample_chains(tgt, chains=4, warmup=300, draws=600, n_leapfrog=8, seed=0, progress=False)
    iu = np.triu_indices(4)
    s = summarize(res.U[:, :, iu[0], iu[1]])
    ref = np.eye(4)[iu]
    assert np.all(np.abs(s["mean"] - ref) < 5 * s["mcse"])


@pytest.mark.numerics
def test_collapsed_density_equals_explicit_gaussian_marginal():  # T17
    net, x, y, gram = tiny((2, 2), P=8)
    cfg = net.cfg.with_widths(3)
    tgt = CollapsedTarget(cfg, gram, y, 0.2)
    theta = tgt.prior_draw(2, torch.Generator().manual_seed(5))
    lp, _ = tgt.log_prob(theta)
    lp2, g, _ = tgt.log_prob_and_grad(theta)
    # the same density through two code paths, float64 (matrix worst 0)
    assert_close(lp, lp2, atol=1e-10, label="T17 log_prob vs log_prob_and_grad", kind="observed")
    from attnlab.paths.networks.architecture import PathNetwork

    pnet = PathNetwork(cfg)
    for c in range(2):
        w = tgt.unpack(theta[c : c + 1])
        w = {"V": [v[0] for v in w["V"]], "a": w["a"][0]}
        V0 = torch.zeros(3, x.shape[-1], dtype=torch.float64, requires_grad=True)
        J = torch.autograd.functional.jacobian(lambda v, w=w: pnet.forward(x, {**w, "V0": v}), V0).reshape(8, -1)
        cov = J @ J.T * cfg.variances[0] + 0.2 * torch.eye(8, dtype=torch.float64)
        Y = torch.tensor(y)
        marg = -0.5 * torch.logdet(cov) - 0.5 * Y @ torch.linalg.solve(cov, Y)
        prior = -0.5 * (theta[c] ** 2 / tgt.prior_sd**2).sum()
        # against the explicit Gaussian marginal: logdet and solve of an 8 x 8 covariance (matrix worst
        # 3.6e-15, 2.8e+04x inside)
        assert_close(float(lp[c] - prior), float(marg), atol=1e-10, label="T17 collapsed vs marginal", kind="observed")


@pytest.mark.numerics
def test_full_target_is_the_layer_form_posterior():
    """The full log density equals -(1/2T)|f - y|^2 - prior with f from the layer recursion [N1-N4]."""
    from attnlab.paths.networks.architecture import PathNetwork
    from attnlab.paths.sampling.sampler import FullTarget

    net, x, y, gram = tiny((2, 2), P=8)
    cfg = net.cfg.with_widths(3)
    tgt = FullTarget(cfg, gram, y, 0.3)
    theta = tgt.prior_draw(2, torch.Generator().manual_seed(2))
    lp, _ = tgt.log_prob(theta)
    for c in range(2):
        w = tgt.unpack(theta[c : c + 1])
        w = {"V0": w["V0"][0], "V": [v[0] for v in w["V"]], "a": w["a"][0]}
        f = PathNetwork(cfg).forward(x, w)
        ref = -0.5 * ((f - torch.tensor(y)) ** 2).sum() / 0.3 - 0.5 * (theta[c] ** 2 / tgt.prior_sd**2).sum()
        # the same float64 formula through the layer recursion (matrix worst 3.6e-15, 2.8e+04x inside)
        assert_close(float(lp[c]), float(ref), atol=1e-10, label="full target vs layer form", kind="observed")
