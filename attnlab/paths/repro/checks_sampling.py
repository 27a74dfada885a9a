"""The direct computations of paths' samplers (spec §9, §12): T12, T14 and T17 (`paths_sampling_units`: the chain
diagnostics and the collapsed sampler), T13 and S4 on a correlated Gaussian and a tiny network (`paths_samplers`).
Each `compute(seed, size)` returns named numbers, which reproduce saves; tests/paths/test_sampling.py checks the
same functions; the rows are in `targets.py`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from attnlab.paths.repro.checks_theory import tiny_paths


def ar1_chains(rho: float, n: int, chains: int, seed: int) -> Any:
    """[chains, n] stationary AR(1) chains with coefficient `rho` and unit innovations."""

    rng = np.random.default_rng(seed)
    x = np.zeros((chains, n))
    x[:, 0] = rng.standard_normal(chains) / math.sqrt(1 - rho**2)
    for t in range(1, n):
        x[:, t] = rho * x[:, t - 1] + rng.standard_normal(chains)
    return x


def _diagnostics() -> dict:
    """T12: the largest relative error of ESS and bulk ESS against n(1 − ρ)/(1 + ρ) for ρ = 0, 0.5, 0.9 (4 chains
    of 4000), and R̂ of 4 chains of 1000 when one is shifted by 2."""
    from attnlab.paths.sampling.diagnostics import ess, ess_bulk, rhat

    err = 0.0
    for rho in (0.0, 0.5, 0.9):
        x = ar1_chains(rho, 4000, 4, 1)
        expect = x.size * (1 - rho) / (1 + rho)
        err = max(err, abs(ess(x) - expect) / expect, abs(ess_bulk(x) - expect) / expect)
    x = ar1_chains(0.5, 1000, 4, 2)
    x[0] += 2.0
    return {"T12_ess_max_rel_err": float(err), "T12_rhat_shifted": float(rhat(x))}


def _collapsed() -> dict:
    """T14: prior-only collapsed HMC (4 chains, 300 + 600 draws) on a tiny network: the largest |mean Û − Σ²I| in
    MCSE units; T17: the collapsed log density against the explicit Gaussian marginal over V^(0) (its Jacobian)."""
    import torch

    from attnlab.paths.networks.architecture import PathNetwork
    from attnlab.paths.sampling.diagnostics import summarize
    from attnlab.paths.sampling.sampler import CollapsedTarget, sample_chains

    net, x, y, gram = tiny_paths((2, 2), P=6)
    tgt = CollapsedTarget(net.cfg.with_widths(4), gram, y, 0.1, prior_only=True)
    res = sample_chains(tgt, chains=4, warmup=300, draws=600, n_leapfrog=8, seed=0, progress=False)
    iu = np.triu_indices(4)
    s = summarize(res.U[:, :, iu[0], iu[1]])
    z = float(np.max(np.abs(s["mean"] - np.eye(4)[iu]) / s["mcse"]))
    net, x, y, gram = tiny_paths((2, 2), P=8)
    cfg = net.cfg.with_widths(3)
    tgt = CollapsedTarget(cfg, gram, y, 0.2)
    theta = tgt.prior_draw(2, torch.Generator().manual_seed(5))
    lp, _ = tgt.log_prob(theta)
    pnet, Y, worst = PathNetwork(cfg), torch.tensor(y), 0.0
    for c in range(2):
        w = tgt.unpack(theta[c : c + 1])
        w = {"V": [v[0] for v in w["V"]], "a": w["a"][0]}
        V0 = torch.zeros(3, x.shape[-1], dtype=torch.float64)
        J = torch.autograd.functional.jacobian(lambda v, w=w: pnet.forward(x, {**w, "V0": v}), V0).reshape(8, -1)
        cov = J @ J.T * cfg.variances[0] + 0.2 * torch.eye(8, dtype=torch.float64)
        marg = -0.5 * torch.logdet(cov) - 0.5 * Y @ torch.linalg.solve(cov, Y)
        prior = -0.5 * (theta[c] ** 2 / tgt.prior_sd**2).sum()
        worst = max(worst, abs(float(lp[c] - prior - marg)))
    return {"T14_max_z": z, "T17_max_abs_diff": worst}


def paths_sampling_units(seed: int, size: dict) -> dict:
    """The attention-paths T12, T14 and T17 numbers (module section above)."""
    return {**_diagnostics(), **_collapsed()}


# T13 and S4: the samplers on a correlated Gaussian, and the full against the collapsed sampler ----------------------
class GaussianTarget:
    """A correlated d-dimensional Gaussian (covariance A Aᵀ/d + 0.1 I, A and the mean standard normal from `seed`)
    with the sampler's target interface (`sample_chains`): the T13 check of HMC and MALA."""

    def __init__(self, d: int = 20, seed: int = 0) -> None:
        import torch

        rng = np.random.default_rng(seed)
        A = rng.standard_normal((d, d))
        self.cov = torch.tensor(A @ A.T / d + 0.1 * np.eye(d))
        self.prec = torch.linalg.inv(self.cov)
        self.mu = torch.tensor(rng.standard_normal(d))
        self.dim = d
        self.prior_sd = torch.ones(d, dtype=torch.float64)
        self.cfg = type("GaussianCfg", (), {"L": 1})()

    def prior_draw(self, C: int, g: Any) -> Any:
        """[C, d] standard normal starts."""
        import torch

        return torch.randn(C, self.dim, generator=g, dtype=torch.float64)

    def log_prob_and_grad(self, q: Any) -> tuple:
        """(log density [C], its gradient [C, d], numerical rejections [C]) at q [C, d]."""
        import torch

        z = q - self.mu
        return -0.5 * ((z @ self.prec) * z).sum(-1), -(z @ self.prec), torch.zeros(q.shape[0], dtype=torch.bool)

    def order_parameters(self, q: Any) -> tuple:
        """The draws themselves as the stored "U" [C, 1, d] (and the first coordinate as U_a)."""
        return [q[:, None, :]], q[:, 0]


T13_PAIRS = ((0, 0), (0, 1), (3, 7), (5, 5), (10, 19))  # the second moments checked (the test's)


def _t13_kind(kind: str, draws: int) -> float:
    """The largest |estimate − truth| / MCSE over the 20 means and the second moments `T13_PAIRS`, 4 chains of 400
    warmup + `draws` draws of `kind` (hmc, mala)."""

    from attnlab.paths.sampling.diagnostics import summarize
    from attnlab.paths.sampling.sampler import sample_chains

    tgt: Any = GaussianTarget()  # the sampler's target interface, duck-typed
    res = sample_chains(tgt, chains=4, warmup=400, draws=draws, n_leapfrog=8, kind=kind, seed=3, progress=False)
    x = res.U[:, :, 0, :]  # [C, n, d]
    s = summarize(x)
    z = x - tgt.mu.numpy()
    sp = summarize(np.stack([z[..., i] * z[..., j] for i, j in T13_PAIRS], -1))
    ref = np.array([float(tgt.cov[i, j]) for i, j in T13_PAIRS])
    return float(
        max(np.max(np.abs(s["mean"] - tgt.mu.numpy()) / s["mcse"]), np.max(np.abs(sp["mean"] - ref) / sp["mcse"]))
    )


def _s4_samplers() -> dict:
    """S4: U_hat of the full and the collapsed sampler (4 chains, 200 warmup + 400 draws, 6 leapfrog steps) on a
    tiny network (N = 4, N0 = 6, P = 8, T = 0.5): the largest |difference| / combined MCSE over U's upper triangle."""

    from attnlab.paths.sampling.diagnostics import summarize
    from attnlab.paths.sampling.sampler import CollapsedTarget, FullTarget, sample_chains

    net, _, y, gram = tiny_paths((2, 2), P=8)
    cfg, iu, out = net.cfg.with_widths(4), np.triu_indices(4), {}
    for name, cls in [("full", FullTarget), ("collapsed", CollapsedTarget)]:
        res = sample_chains(cls(cfg, gram, y, 0.5), chains=4, warmup=200, draws=400, n_leapfrog=6, seed=4,
                            progress=False)  # fmt: skip
        out[name] = summarize(res.U[:, :, iu[0], iu[1]])
    comb = np.sqrt(out["full"]["mcse"] ** 2 + out["collapsed"]["mcse"] ** 2)
    return {"S4_max_diff_over_mcse": float(np.max(np.abs(out["full"]["mean"] - out["collapsed"]["mean"]) / comb))}


def paths_samplers(seed: int, size: dict) -> dict:
    """T13 (HMC 800 draws, MALA 2000, as the test) and S4 (module section above)."""
    return {"T13_hmc_max_z": _t13_kind("hmc", 800), "T13_mala_max_z": _t13_kind("mala", 2000), **_s4_samplers()}
