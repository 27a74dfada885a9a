"""Path-path kernels and the precomputed path Gram tensor (spec §4).

Scaled paths xi~^pi_mu = sigma0 xi^pi(x^mu)/sqrt(N0 n_paths) [P, n_paths, N0];
C^{pi pi'}_{mu nu} = xi~^pi_mu . xi~^pi'_nu [K1]; K(U) = sum U^{pi pi'} C^{pi pi'} [K2].
`PathGram` holds either the full tensor M [n_paths, n_paths, P, P] (`gram` mode; N0 then drops out of
the solver's inner loop) or only xi~ (`factor` mode).
"""

from __future__ import annotations

import math
import os

import torch

from attnlab.errors import InputError, check

MAX_PATHS = 4096


def available_memory_bytes() -> int:
    """Available physical memory (Linux sysconf), or 8 GiB if unknown."""
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def memory_estimate(
    P: int, n_paths: int, N0: int, n_tok: int, sum_heads: int, mode: str = "gram", chunk: int = 256
) -> int:
    """Bytes (spec §12): 8 [n_paths^2 P^2 (Gram, stored in full) + P N0 n_paths + P n_tok^2 sum_l H_l
    + chunk P n_paths^2]."""
    gram = n_paths * n_paths * P * P if mode == "gram" else 0
    return 8 * (gram + P * N0 * n_paths + P * n_tok * n_tok * sum_heads + chunk * P * n_paths * n_paths)


def check_memory(
    P: int, n_paths: int, N0: int, n_tok: int, sum_heads: int, mode: str = "auto", budget: float | None = None
) -> str:
    """Decide the Gram mode before allocating; raise InputError when nothing fits. Returns 'gram'|'factor'."""
    if n_paths > MAX_PATHS:
        raise InputError(f"n_paths = prod H_l = {n_paths} exceeds the cap {MAX_PATHS}; use fewer heads or layers")
    budget = 0.5 * available_memory_bytes() if budget is None else float(budget)
    need_gram = memory_estimate(P, n_paths, N0, n_tok, sum_heads, "gram")
    need_factor = memory_estimate(P, n_paths, N0, n_tok, sum_heads, "factor")
    if mode == "auto":
        # gram contraction costs n_paths^2 P^2 per evaluation, factor mode P^2 N0 n_paths
        if need_gram <= budget and n_paths <= N0:
            return "gram"
        mode = "factor" if need_factor <= budget else "gram"
    need = need_gram if mode == "gram" else need_factor
    if need > budget:
        raise InputError(
            f"estimated memory {need / 2**20:.1f} MiB for P={P}, n_paths={n_paths}, mode={mode} "
            f"exceeds the budget {budget / 2**20:.1f} MiB; use factor mode, fewer heads or smaller P"
        )
    return mode


def scaled_paths(xi: torch.Tensor, sigma0_sq: float = 1.0) -> torch.Tensor:
    """xi~ = sigma0 xi / sqrt(N0 n_paths): [P, n_paths, N0] -> same shape."""
    P, n_paths, N0 = xi.shape
    return xi * math.sqrt(sigma0_sq / (N0 * n_paths))


class PathGram:
    """Training-set path kernels. `kernel(U)` [P, P]; `contract(B)` [n_paths, n_paths] = <B, C^{pi pi'}>_F.
    Both accept a leading batch dimension on U / B."""

    def __init__(self, xit: torch.Tensor, mode: str = "gram") -> None:
        check(mode in ("gram", "factor"), f"gram mode must be 'gram' or 'factor', got {mode!r}")
        self.xit = xit.to(torch.float64)
        self.P, self.n_paths, self.N0 = xit.shape
        self.mode = mode
        self.M = torch.einsum("mpi,nqi->pqmn", self.xit, self.xit).contiguous() if mode == "gram" else None

    @property
    def device(self) -> torch.device:
        """Where the kernels are (and so where the action built on them computes)."""
        return self.xit.device

    def to(self, device: torch.device | str) -> PathGram:
        """The same kernels on `device`: xi~ and the stored M are copied (not recomputed there), so every device
        holds the same numbers; `self` when already there."""
        device = torch.device(device)
        if device == self.xit.device:
            return self
        moved = PathGram.__new__(PathGram)
        moved.xit, moved.mode = self.xit.to(device), self.mode
        moved.P, moved.n_paths, moved.N0 = self.P, self.n_paths, self.N0
        moved.M = self.M.to(device) if self.M is not None else None
        return moved

    def kernel(self, U: torch.Tensor) -> torch.Tensor:
        """K(U) = sum_{pi pi'} U^{pi pi'} C^{pi pi'}: U [..., n, n] -> [..., P, P] (spec K2)."""
        if self.M is not None:
            n = self.n_paths
            K = U.reshape(*U.shape[:-2], n * n) @ self.M.reshape(n * n, -1)
            return K.reshape(*U.shape[:-2], self.P, self.P)
        Z = torch.einsum("...pq,nqi->...npi", U, self.xit)
        return torch.einsum("mpi,...npi->...mn", self.xit, Z)

    def contract(self, B: torch.Tensor) -> torch.Tensor:
        """Gamma^{pi pi'} = sum_{mu nu} B_{mu nu} C^{pi pi'}_{mu nu}: B [..., P, P] -> [..., n, n] (spec T5)."""
        if self.M is not None:
            n = self.n_paths
            G = B.reshape(*B.shape[:-2], -1) @ self.M.reshape(n * n, -1).T
            return G.reshape(*B.shape[:-2], n, n)
        Bx = torch.einsum("...mn,nqi->...mqi", B, self.xit)
        return torch.einsum("mpi,...mqi->...pq", self.xit, Bx)

    def path_kernels(self) -> torch.Tensor:
        """The full tensor C [n_paths, n_paths, P, P] (materialised on demand in factor mode)."""
        return self.M if self.M is not None else torch.einsum("mpi,nqi->pqmn", self.xit, self.xit)


def cross_kernel(U: torch.Tensor, xit_test: torch.Tensor, xit_train: torch.Tensor, chunk: int = 512) -> torch.Tensor:
    """k(x, x^mu) = sum U^{pi pi'} xi~^pi(x) . xi~^pi'_mu: -> [n_test, P], built chunk by chunk over test points."""
    Z = torch.einsum("pq,nqi->npi", U, xit_train)  # [P, n_paths, N0]
    return torch.cat(
        [torch.einsum("tpi,npi->tn", xit_test[i : i + chunk], Z) for i in range(0, xit_test.shape[0], chunk)], dim=0
    )


def diag_kernel(U: torch.Tensor, xit_test: torch.Tensor) -> torch.Tensor:
    """K(x, x) = sum U^{pi pi'} xi~^pi(x) . xi~^pi'(x) for each test point: -> [n_test]."""
    return torch.einsum("tpi,pq,tqi->t", xit_test, U, xit_test)
