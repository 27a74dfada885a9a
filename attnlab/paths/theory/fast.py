"""A NumPy/SciPy mirror of `theory.evaluate` for the solver's inner loop (same equations [T1]-[T7]; no autograd,
so about ten times less per-call overhead than the torch version on small problems). Gram mode only.

`evaluate_np(prob, Us)` -> (S, [dS/dU_l]) with Us a list of [n_l, n_l] float64 arrays.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import cho_factor, cho_solve, lapack

from attnlab.errors import NumericalError
from attnlab.paths.theory.action import Problem


class FastAction:
    """Caches M as a [n_paths^2, P^2] array and Y; `__call__(Us)` returns (S, grads)."""

    def __init__(self, prob: Problem) -> None:
        self.prob = prob
        n, P = prob.gram.n_paths, prob.gram.P
        self.M = prob.gram.path_kernels().numpy().reshape(n * n, P * P)
        self.Y = prob.Y.numpy()
        self.n, self.P = n, P

    def energy(self, U1: np.ndarray) -> tuple[float, np.ndarray]:
        """(E, Gamma [n, n]) with one Cholesky of K+TI."""
        P = self.P
        Kt = (U1.reshape(-1) @ self.M).reshape(P, P)
        Kt[np.diag_indices(P)] += self.prob.T
        c, info = lapack.dpotrf(Kt, lower=1, clean=0)
        if info != 0:
            raise NumericalError(
                f"Cholesky of K+TI failed at pivot {info} (T={self.prob.T:g}); "
                f"raise the temperature or rescale the inputs"
            )
        a = cho_solve((c, True), self.Y)
        E = (2.0 * np.log(np.diag(c)).sum() + self.Y @ a) / P
        A, info = lapack.dpotri(c, lower=1)
        A = np.tril(A) + np.tril(A, -1).T
        B = A - np.outer(a, a)
        return E, (self.M @ B.reshape(-1)).reshape(self.n, self.n)

    def __call__(self, Us: list[np.ndarray]) -> tuple[float, list[np.ndarray]]:
        prob = self.prob
        E, Gam = self.energy(Us[0])
        Nmax, s2 = prob.N_max, prob.variances
        facs = [cho_factor(U, lower=True) for U in Us]
        inv = [cho_solve(f, np.eye(len(U))) for f, U in zip(facs, Us)]
        ld = [2.0 * np.log(np.diag(f[0])).sum() for f in facs]
        if prob.form == "simple":
            n = Us[0].shape[0]
            S = np.trace(Us[0]) / prob.Sigma2 - ld[0] + prob.alpha * E
            g = np.eye(n) / prob.Sigma2 - inv[0] + Gam / Nmax
            return S, [0.5 * (g + g.T)]
        L, H, N = prob.L, prob.H, prob.widths
        beta = s2[L + 1] * (H[-1] * N[L - 1] / N[L] - 1.0)
        gamma = N[L - 1] * s2[L + 1] * np.trace(Us[-1]) / (N[L] * s2[L])
        U_a = 0.5 * (-beta + math.sqrt(beta * beta + 4.0 * gamma))
        inv.append(np.array([[1.0 / U_a]]))
        ld.append(math.log(U_a))
        ent = N[L] * (U_a / s2[L + 1] - math.log(U_a))
        kr = [np.kron(np.eye(H[l]), inv[l + 1]) for l in range(L)]
        for l in range(L):
            ent += N[l] * (np.sum(kr[l] * Us[l]) / s2[l + 1] - ld[l] + H[l] * ld[l + 1])
        S = ent / Nmax + prob.alpha * E
        grads = []
        for l in range(L):
            g = N[l] * (kr[l] / s2[l + 1] - inv[l])
            if l == 0:
                g = g + Gam
            else:
                n = Us[l].shape[0]
                Ml = np.einsum("hihj->ij", Us[l - 1].reshape(H[l - 1], n, H[l - 1], n))
                g = g + N[l - 1] * (H[l - 1] * inv[l] - inv[l] @ Ml @ inv[l] / s2[l])
            g = g / Nmax
            grads.append(0.5 * (g + g.T))
        return S, grads


class NumpyParam:
    """NumPy mirror of `Param` for the fast path."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.idx = [np.tril_indices(n) for n in sizes]
        self.counts = [n * (n + 1) // 2 for n in sizes]

    def Rs(self, theta: np.ndarray) -> list[np.ndarray]:
        out, k = [], 0
        for n, (i, j), c in zip(self.sizes, self.idx, self.counts):
            v = theta[k : k + c].copy()
            v[i == j] = np.exp(v[i == j])
            R = np.zeros((n, n))
            R[i, j] = v
            out.append(R)
            k += c
        return out

    def grad_theta(self, Rs: list[np.ndarray], grads: list[np.ndarray]) -> np.ndarray:
        parts = []
        for R, G, (i, j) in zip(Rs, grads, self.idx):
            v = (2.0 * G @ R)[i, j]
            v[i == j] *= R[i, j][i == j]
            parts.append(v)
        return np.concatenate(parts)
