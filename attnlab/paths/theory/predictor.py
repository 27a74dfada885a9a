"""Mean/variance predictor, metrics, GP baselines and kernel-task alignment (spec §6).

f_bar(x) = k^T (K+TI)^{-1} Y [P1]; sigma_f^2(x) = K(x,x) - k^T (K+TI)^{-1} k [P2], with
k_mu(x) = sum U^{pi pi'} C^{pi pi'}(x, x^mu). Test scaled paths xit_test: [n_test, n_paths, N0].
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from attnlab.errors import InputError, NumericalError, check
from attnlab.paths.networks.kernels import PathGram, cross_kernel, diag_kernel


@dataclass
class Prediction:
    """Mean [n_test] and latent variance [n_test] (noise T added if include_noise)."""

    mean: np.ndarray
    var: np.ndarray


def predict(
    U: torch.Tensor | np.ndarray,
    gram: PathGram,
    Y: torch.Tensor | np.ndarray,
    T: float,
    xit_test: torch.Tensor,
    include_noise: bool = False,
) -> Prediction:
    """[P1]/[P2] for every test point (test kernels built chunk by chunk)."""
    check(T > 0, f"temperature: must be > 0, got {T}")
    U = torch.as_tensor(U, dtype=torch.float64)
    Y = torch.as_tensor(Y, dtype=torch.float64)
    check(
        tuple(U.shape) == (gram.n_paths, gram.n_paths),
        f"U: expected [{gram.n_paths}, {gram.n_paths}], got {tuple(U.shape)}",
    )
    check(
        xit_test.shape[1:] == gram.xit.shape[1:],
        f"test paths: expected [n_test, {gram.n_paths}, {gram.N0}], got {tuple(xit_test.shape)}",
    )
    K = gram.kernel(U) + T * torch.eye(gram.P, dtype=torch.float64)
    Lc, info = torch.linalg.cholesky_ex(K)
    if int(info) != 0:
        raise NumericalError(f"Cholesky of K+TI failed at pivot {int(info)} (T={T:g}); raise the temperature")
    k = cross_kernel(U, xit_test, gram.xit)  # [n_test, P]
    mean = k @ torch.cholesky_solve(Y[:, None], Lc)[:, 0]
    v = torch.linalg.solve_triangular(Lc, k.T, upper=False)
    var = diag_kernel(U, xit_test) - (v * v).sum(0)
    if include_noise:
        var = var + T
    return Prediction(mean.numpy(), var.clamp_min(0.0).numpy())


def metrics(pred: Prediction, y: np.ndarray) -> dict:
    """accuracy = mean 1[sign f = y]; gauss_acc = mean Phi(y f / sigma_f); mse (y in {+-1} for the first two)."""
    from scipy.special import ndtr

    y = np.asarray(y, dtype=np.float64)
    bad = y[~np.isin(y, (-1.0, 1.0))]
    check(bad.size == 0, f"y: the classification metrics need labels in {{-1, +1}} (spec §12), got {bad[:3].tolist()}")
    sd = np.sqrt(np.maximum(pred.var, 1e-300))
    return {
        "accuracy": float(np.mean(np.sign(pred.mean) == y)),
        "gauss_acc": float(np.mean(ndtr(y * pred.mean / sd))),
        "mse": float(np.mean((pred.mean - y) ** 2)),
    }


def gp_U(n_paths: int, Sigma2: float = 1.0, paths: list[int] | None = None) -> torch.Tensor:
    """U = Sigma^2 I, optionally restricted to a path subset (other diagonal entries zero)."""
    d = torch.zeros(n_paths, dtype=torch.float64)
    d[list(range(n_paths)) if paths is None else paths] = Sigma2
    return torch.diag(d)


def alignment(U: torch.Tensor | np.ndarray, gram: PathGram, Y: np.ndarray, top: int = 30) -> dict:
    """Eigenpairs of the training K(U), descending: overlap_i = |v_i.Y|/sqrt(P),
    captured c_k = sum_{i<=k}(v_i.Y)^2/|Y|^2."""
    K = gram.kernel(torch.as_tensor(U, dtype=torch.float64)).numpy()
    lam, V = np.linalg.eigh(0.5 * (K + K.T))
    lam, V = lam[::-1], V[:, ::-1]
    proj = V.T @ np.asarray(Y, dtype=np.float64)
    return {
        "eigenvalues": lam[:top],
        "overlap": np.abs(proj[:top]) / math.sqrt(len(Y)),
        "captured": np.cumsum(proj**2)[:top] / float(np.sum(np.asarray(Y) ** 2)),
    }


def add_jitter(K: np.ndarray, mode: str = "auto") -> tuple[np.ndarray, dict]:
    """Check a user-supplied kernel (symmetric within 1e-10 relative, lambda_min >= -1e-10 lambda_max); with
    `auto`, add jitter from 1e-10 mean(diag) by factors of 10 up to 1e-6 mean(diag) until Cholesky succeeds.
    Returns (K + jitter I, {"absolute": ..., "relative": ...}); never silent (the caller reports it)."""
    K = np.asarray(K, dtype=np.float64)
    check(K.ndim == 2 and K.shape[0] == K.shape[1], f"kernel: expected a square matrix, got shape {K.shape}")
    scale = float(np.abs(K).max()) or 1.0
    asym = float(np.abs(K - K.T).max()) / scale
    check(asym <= 1e-10, f"kernel: not symmetric (relative asymmetry {asym:.3g} > 1e-10)")
    lam = np.linalg.eigvalsh(0.5 * (K + K.T))
    check(
        lam[0] >= -1e-10 * lam[-1],
        f"kernel: lambda_min = {lam[0]:.3g} < -1e-10 * lambda_max = {-1e-10 * lam[-1]:.3g}; not PSD",
    )
    md = float(np.mean(np.diag(K)))
    try:
        np.linalg.cholesky(K)
        return K, {"absolute": 0.0, "relative": 0.0}
    except np.linalg.LinAlgError:
        pass
    check(mode == "auto", "kernel: Cholesky failed and jitter is off; pass jitter='auto'")
    rel = 1e-10
    while rel <= 1e-6 * (1 + 1e-9):
        Kj = K + rel * md * np.eye(len(K))
        try:
            np.linalg.cholesky(Kj)
            warnings.warn(f"kernel: added jitter {rel * md:.3g} ({rel:.0e} x mean(diag)) to make it PD", stacklevel=2)
            return Kj, {"absolute": rel * md, "relative": rel}
        except np.linalg.LinAlgError:
            rel *= 10
    raise InputError(f"kernel: still not PD after jitter 1e-6 * mean(diag) = {1e-6 * md:.3g}")
