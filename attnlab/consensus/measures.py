"""Consensus measures (spec section 6), all on `X: [batch, token, dim]`, computed on x_hat = x/||x||.

Each returns a float64 tensor `[batch]` (or `[batch]` ints for `cluster_count`). Zero vectors are rejected.
"""

from __future__ import annotations

import numpy as np
import torch

from attnlab.errors import InputError

MEASURES = (
    "E_first",
    "E_pair",
    "max_gap",
    "clustered_fraction",
    "cluster_count",
    "top_share",
    "participation_ratio",
    "energy",
)


def unit(X: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """x_hat = x/||x|| in float64; raises on a zero vector (naming batch and token)."""
    X = torch.as_tensor(X).to(torch.float64)
    if X.ndim == 2:
        X = X.unsqueeze(0)
    norms = X.norm(dim=-1, keepdim=True)
    if (norms < eps).any():
        b, i = (norms[..., 0] < eps).nonzero()[0].tolist()
        raise InputError(f"zero vector (norm < {eps:g}) at batch {b}, token {i}; measures need nonzero tokens")
    return X / norms


def gram(X: torch.Tensor) -> torch.Tensor:
    """Cosine matrix `[batch, token, token]` of the unit tokens."""
    U = unit(X)
    return U @ U.transpose(-1, -2)


def E_first(X: torch.Tensor, ref: int = 0) -> torch.Tensor:
    """E_first = 1 - (1/n) sum_j <x_ref, x_j> (j = ref included; signed cosine), range [0, 2]."""
    U = unit(X)
    return 1.0 - (U[:, ref : ref + 1, :] * U).sum(-1).mean(-1)


def E_pair(X: torch.Tensor) -> torch.Tensor:
    """E_pair = 1 - ||mean_i x_hat_i||^2 (= 1 - mean of all pairwise cosines), range [0, 1]."""
    U = unit(X)
    return 1.0 - (U.mean(1) ** 2).sum(-1)


def max_gap(X: torch.Tensor) -> torch.Tensor:
    """max_{i,j} (1 - <x_i, x_j>), range [0, 2]."""
    return (1.0 - gram(X)).amax(dim=(-1, -2))


def clustered_fraction_from_gram(G: torch.Tensor, theta: float = 0.999) -> torch.Tensor:
    """Share of ordered pairs i != j with cosine >= theta, from a cosine matrix `[batch, n, n]`."""
    n = G.shape[-1]
    hits = (G >= theta).sum(dim=(-1, -2)).to(torch.float64) - (torch.diagonal(G, dim1=-2, dim2=-1) >= theta).sum(-1)
    return hits / (n * (n - 1))


def clustered_fraction(X: torch.Tensor, theta: float = 0.999) -> torch.Tensor:
    """Share of pairs i != j with cosine >= theta (default 0.999)."""
    return clustered_fraction_from_gram(gram(X), theta)


def cluster_count(X: torch.Tensor, theta: float = 0.999) -> torch.Tensor:
    """Connected components of the graph with an edge where cosine >= theta, per batch item (`[batch]` int64)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    adj = (gram(X) >= theta).numpy()
    counts = [connected_components(csr_matrix(a), directed=False)[0] for a in adj]
    return torch.tensor(counts, dtype=torch.int64)


def _gram_eigs(X: torch.Tensor) -> torch.Tensor:
    """Eigenvalues of the Gram matrix X_hat X_hat^T divided by n (they sum to 1), `[batch, min(n,d)]`."""
    U = unit(X)
    n, d = U.shape[1], U.shape[2]
    M = U.transpose(-1, -2) @ U if d <= n else U @ U.transpose(-1, -2)  # same nonzero spectrum
    return torch.linalg.eigvalsh(M).clamp_min(0) / n


def top_share(X: torch.Tensor) -> torch.Tensor:
    """lambda_1 / n of the Gram matrix, range [1/min(n,d), 1]; 1 at consensus."""
    return _gram_eigs(X).amax(-1)


def participation_ratio(X: torch.Tensor) -> torch.Tensor:
    """1 / sum_k (lambda_k / n)^2, range [1, min(n,d)]; 1 at consensus, n for orthonormal tokens."""
    return 1.0 / (_gram_eigs(X) ** 2).sum(-1)


def energy(X: torch.Tensor, beta: float, P: torch.Tensor | None = None) -> torch.Tensor:
    """F_{beta,P}(X) = (1/(2 beta n^2)) sum_ij (exp(beta x_i^T P x_j) - 1) (spec 4.1).

    beta -> 0 gives (1/2n^2) sum s_ij."""
    U = unit(X)
    n = U.shape[1]
    S = U @ U.transpose(-1, -2) if P is None else U @ P @ U.transpose(-1, -2)
    if beta == 0:
        return S.sum(dim=(-1, -2)) / (2 * n * n)
    return torch.expm1(beta * S).sum(dim=(-1, -2)) / (2 * beta * n * n)


def hemisphere_margin(X: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
    """min_i <w, x_hat_i>; `w` `[dim]` or `[batch, dim]`; default the (normalised) mean direction."""
    U = unit(X)
    if w is None:
        w = U.mean(1)
        w = w / w.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    w = torch.as_tensor(w, dtype=torch.float64)
    if w.ndim == 1:
        w = w.unsqueeze(0).expand(U.shape[0], -1)
    return (U * w.unsqueeze(1)).sum(-1).amin(-1)


def hemisphere_lp(X: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Exact test: max t s.t. <w, x_hat_i> >= t, w in [-1,1]^d (scipy linprog). Returns (margin [batch], w [batch, d]).

    The margin is > 0 iff the tokens lie in an open hemisphere; it is 0 otherwise (w = 0 is feasible).
    """
    from scipy.optimize import linprog

    U = unit(X).numpy()
    B, n, d = U.shape
    margins, ws = np.zeros(B), np.zeros((B, d))
    c = np.zeros(d + 1)
    c[-1] = -1.0
    for b in range(B):
        A = np.hstack([-U[b], np.ones((n, 1))])  # t - <w, x_i> <= 0
        res = linprog(c, A_ub=A, b_ub=np.zeros(n), bounds=[(-1, 1)] * d + [(None, 1)], method="highs")
        margins[b] = max(0.0, -res.fun) if res.success else 0.0
        ws[b] = res.x[:d] if res.success else 0.0
    return margins, ws


def compute(names: tuple[str, ...] | list[str], X: torch.Tensor, **kw) -> dict[str, torch.Tensor]:
    """Compute the named measures of X (`kw`: `ref` for E_first, `beta`/`P` for energy, `theta`)."""
    fns = {
        "E_first": lambda: E_first(X, kw.get("ref", 0)),
        "E_pair": lambda: E_pair(X),
        "max_gap": lambda: max_gap(X),
        "clustered_fraction": lambda: clustered_fraction(X, kw.get("theta", 0.999)),
        "cluster_count": lambda: cluster_count(X, kw.get("theta", 0.999)),
        "top_share": lambda: top_share(X),
        "participation_ratio": lambda: participation_ratio(X),
        "energy": lambda: energy(X, kw.get("beta", 1.0), kw.get("P")),
    }
    out = {}
    for name in names:
        if name not in fns:
            raise InputError(f"unknown measure '{name}'; valid: {', '.join(MEASURES)}")
        out[name] = fns[name]()
    return out
