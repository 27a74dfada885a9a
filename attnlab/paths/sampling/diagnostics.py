"""MCMC diagnostics written in-house (spec §7.3): rank-normalised split-R-hat, bulk/tail ESS (Vehtari et al. 2021),
MCSE = sd/sqrt(ESS), E-BFMI. Draws are arrays `[chain, draw]` (or `[chain, draw, quantity]` for `summarize`)."""

from __future__ import annotations

import numpy as np


def split_chains(x: np.ndarray) -> np.ndarray:
    """[C, n] -> [2C, n//2] (the first and second half of every chain)."""
    n = x.shape[1] // 2
    return np.concatenate([x[:, :n], x[:, x.shape[1] - n :]], axis=0)


def rank_normalize(x: np.ndarray) -> np.ndarray:
    """Pooled ranks -> normal scores z = Phi^{-1}((r - 3/8)/(S + 1/4)), same shape."""
    from scipy.special import ndtri  # scipy.stats costs ~0.8 s to import; only the sampler needs it
    from scipy.stats import rankdata

    r = rankdata(x, method="average").reshape(x.shape)
    return ndtri((r - 0.375) / (x.size + 0.25))


def _rhat_raw(x: np.ndarray) -> float:
    C, n = x.shape
    means = x.mean(1)
    W = x.var(1, ddof=1).mean()
    B = n * means.var(ddof=1)
    if W <= 0:
        return float("nan") if B > 0 else 1.0
    return float(np.sqrt(((n - 1) / n * W + B / n) / W))


def rhat(x: np.ndarray) -> float:
    """Rank-normalised split-R-hat: the max of the bulk and the folded (|x - median|) versions. Defined for one
    chain too (its two halves); NaN (not available) when a half holds fewer than 2 draws."""
    s = split_chains(np.asarray(x, dtype=np.float64))
    if s.shape[1] < 2:
        return float("nan")
    bulk = _rhat_raw(rank_normalize(s))
    folded = _rhat_raw(rank_normalize(np.abs(s - np.median(s))))
    return max(bulk, folded)


def _autocov(x: np.ndarray) -> np.ndarray:
    """Biased autocovariance per chain by FFT: [C, n] -> [C, n]."""
    C, n = x.shape
    xc = x - x.mean(1, keepdims=True)
    m = 1 << int(np.ceil(np.log2(2 * n)))
    f = np.fft.rfft(xc, m, axis=1)
    return np.fft.irfft(f * np.conj(f), m, axis=1)[:, :n] / n


def ess(x: np.ndarray) -> float:
    """Effective sample size of chains [C, n] (Geyer's initial monotone sequence on the multi-chain rho_t)."""
    x = np.asarray(x, dtype=np.float64)
    C, n = x.shape
    if n < 4 or np.ptp(x) == 0:
        return float("nan")
    acov = _autocov(x)
    mean_var = acov[:, 0].mean() * n / (n - 1)
    var_plus = mean_var * (n - 1) / n + (x.mean(1).var(ddof=1) if C > 1 else 0.0)
    rho = np.zeros(n)
    rho[0] = 1.0
    even, odd = 1.0, 1 - (mean_var - acov[:, 1].mean()) / var_plus
    rho[1] = odd
    t = 1
    while t < n - 3 and even + odd > 0:
        even = 1 - (mean_var - acov[:, t + 1].mean()) / var_plus
        odd = 1 - (mean_var - acov[:, t + 2].mean()) / var_plus
        if even + odd >= 0:
            rho[t + 1], rho[t + 2] = even, odd
        t += 2
    max_t = t
    if even > 0 and max_t + 1 < n:
        rho[max_t + 1] = even
    t = 1
    while t <= max_t - 2:
        if rho[t + 1] + rho[t + 2] > rho[t - 1] + rho[t]:
            rho[t + 1] = rho[t + 2] = (rho[t - 1] + rho[t]) / 2
        t += 2
    total = C * n
    tau = -1 + 2 * rho[:max_t].sum() + (rho[max_t + 1] if max_t + 1 < n else 0.0)
    tau = max(tau, 1 / np.log10(total))
    return float(total / tau)


def ess_bulk(x: np.ndarray) -> float:
    """ESS of the rank-normalised split chains."""
    return ess(rank_normalize(split_chains(np.asarray(x, dtype=np.float64))))


def ess_tail(x: np.ndarray) -> float:
    """min of the ESS of the 5% and 95% quantile indicators (split chains)."""
    s = split_chains(np.asarray(x, dtype=np.float64))
    if s.shape[1] < 4:
        return float("nan")
    q5, q95 = np.quantile(s, [0.05, 0.95])
    return min(ess((s <= q5).astype(float)), ess((s <= q95).astype(float)))


def ebfmi(energy: np.ndarray) -> np.ndarray:
    """E-BFMI per chain from the Hamiltonian energy at each draw [C, n]."""
    e = np.asarray(energy, dtype=np.float64)
    return np.sum(np.diff(e, axis=1) ** 2, 1) / np.maximum(np.sum((e - e.mean(1, keepdims=True)) ** 2, 1), 1e-300)


def summarize(draws: np.ndarray) -> dict[str, np.ndarray]:
    """Per quantity of draws [C, n, k]: mean, sd, rhat, ess_bulk, ess_tail and mcse = sd/sqrt(ess_bulk); a
    statistic that too few draws leave undefined is NaN."""
    draws = np.asarray(draws, dtype=np.float64)
    k = draws.shape[2]
    out = {name: np.zeros(k) for name in ["mean", "sd", "rhat", "ess_bulk", "ess_tail", "mcse"]}
    for j in range(k):
        x = draws[:, :, j]
        out["mean"][j], out["sd"][j] = x.mean(), x.std(ddof=1) if x.size > 1 else float("nan")
        out["rhat"][j], out["ess_bulk"][j], out["ess_tail"][j] = rhat(x), ess_bulk(x), ess_tail(x)
        out["mcse"][j] = out["sd"][j] / np.sqrt(max(ess(x), 1.0))
    return out


def rel_frob_err_mcse(U_hat: np.ndarray, U_mcse: np.ndarray, U: np.ndarray) -> float:
    """MCSE of the relative Frobenius error e = |U_hat - U|_F / |U|_F of a sampled U_hat [n, n] (symmetric, its
    per-entry MCSE `U_mcse` [n, n]) against a fixed U [n, n], by the delta method: de/dU_hat = (U_hat - U) /
    (|U_hat - U|_F |U|_F), each upper-triangle entry one variable (an off-diagonal one enters e twice, so its
    coefficient doubles), their Monte-Carlo errors combined as independent (the run keeps no cross-entry
    covariance; docs/attention-paths.md, "Intervals of the sampler rows", compares it with one). At U_hat = U the
    first-order term vanishes: sqrt(sum of U_mcse^2 over [n, n]) / |U|_F (the root of E|U_hat - E U_hat|_F^2)."""
    U_hat, mc, U = (np.asarray(a, dtype=np.float64) for a in (U_hat, U_mcse, U))
    if U_hat.ndim != 2 or U_hat.shape[0] != U_hat.shape[1] or mc.shape != U_hat.shape or U.shape != U_hat.shape:
        raise ValueError(f"rel_frob_err_mcse: U_hat, U_mcse and U must be one [n, n] shape, got "
                         f"{U_hat.shape}, {mc.shape}, {U.shape}")  # fmt: skip
    norm_U, norm_D = float(np.linalg.norm(U)), float(np.linalg.norm(U_hat - U))
    if norm_D == 0.0:
        return float(np.linalg.norm(mc)) / norm_U
    g = (U_hat - U) / (norm_D * norm_U)
    iu = np.triu_indices(U.shape[0])
    coef = (g + g.T - np.diag(np.diag(g)))[iu]  # de/d(upper-triangle entry): both symmetric entries move
    return float(np.sqrt(np.sum((coef * mc[iu]) ** 2)))
