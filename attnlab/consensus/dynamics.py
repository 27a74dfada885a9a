"""Attention drive and tangent field on the product of spheres (spec section 3).

States are `X: [batch, token, dim]` float64. Weights are `None` (the identity), `[head, dim, dim]` or
`[batch, head, dim, dim]`; inverse temperatures `beta` are `[head]` or `[batch, head]`.

- scores   s^h_ij = beta_h x_i^T P_h x_j
- SA       alpha^h_ij = softmax over j in N(i) (N(i) = all tokens, or 1..i for the causal mask)
- USA      alpha^h_ij = exp(s^h_ij) / n (the causal USA keeps 1/n: spec Decision)
- drive    v_i = sum_h sum_j alpha^h_ij V_h x_j
- field    F_i = v_i - <x_i, v_i> x_i   (RST Eq. 5, extended off the sphere by the same formula)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.consensus.names import KINDS, MASKS
from attnlab.errors import InputError, check_choice

Weights = "torch.Tensor | None"


@dataclass(frozen=True)
class AttentionSpec:
    """Kind (SA/USA), mask (full/causal) and inverse temperatures `beta` ([head] or [batch, head])."""

    kind: str
    mask: str
    beta: torch.Tensor

    def __post_init__(self) -> None:
        check_choice(self.kind, KINDS, "attention kind")
        check_choice(self.mask, MASKS, "mask")
        beta = torch.as_tensor(self.beta, dtype=torch.float64)
        if beta.ndim == 0:
            beta = beta.reshape(1)
        if beta.ndim not in (1, 2) or not torch.isfinite(beta).all() or (beta < 0).any():
            raise InputError(f"beta must be finite and >= 0 with shape [head] or [batch, head], got {self.beta}")
        object.__setattr__(self, "beta", beta)

    @property
    def heads(self) -> int:
        return int(self.beta.shape[-1])

    def to(self, device: torch.device) -> AttentionSpec:
        """The same spec with `beta` on `device` (checked once, on the cpu, at construction)."""
        spec = AttentionSpec(self.kind, self.mask, self.beta)
        object.__setattr__(spec, "beta", self.beta.to(device))
        return spec


def check_tokens(X: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Validate `X: [batch, token, dim]` (finite, no zero token, n, d >= 2) and return it normalised, float64."""
    X = torch.as_tensor(X, dtype=torch.float64)
    if X.ndim == 2:
        X = X.unsqueeze(0)
    if X.ndim != 3:
        raise InputError(f"tokens must have shape [batch, token, dim], got {tuple(X.shape)}")
    if X.shape[1] < 2 or X.shape[2] < 2:
        raise InputError(f"need n >= 2 tokens and d >= 2 dimensions, got n={X.shape[1]}, d={X.shape[2]}")
    if not torch.isfinite(X).all():
        raise InputError("tokens contain NaN or Inf")
    norms = X.norm(dim=-1)
    if (norms < eps).any():
        b, i = (norms < eps).nonzero()[0].tolist()
        raise InputError(f"zero token vector (norm < {eps:g}) at batch {b}, token {i}; tokens must be nonzero")
    return X / norms.unsqueeze(-1)


def check_weights(
    W: torch.Tensor | None, name: str, d: int, heads: int | None = None, batch: int | None = None
) -> torch.Tensor | None:
    """Validate a weight tensor `[d,d]`, `[H,d,d]` or `[B,H,d,d]`; return it float64 with a head axis."""
    if W is None:
        return None
    W = torch.as_tensor(W, dtype=torch.float64)
    if W.ndim == 2:
        W = W.unsqueeze(0)
    if W.ndim not in (3, 4) or W.shape[-1] != d or W.shape[-2] != d:
        raise InputError(f"{name} must have shape [{d},{d}], [H,{d},{d}] or [B,H,{d},{d}], got {tuple(W.shape)}")
    if heads is not None and W.shape[-3] != heads:
        raise InputError(f"{name} has {W.shape[-3]} heads but beta has {heads}")
    if W.ndim == 4 and batch is not None and W.shape[0] != batch:
        raise InputError(f"{name} has batch {W.shape[0]} but the state has batch {batch}")
    bad = ~torch.isfinite(W)
    if bad.any():
        idx = bad.nonzero()[0].tolist()
        where = f"batch {idx[0]}, head {idx[1]}" if W.ndim == 4 else f"head {idx[0]}"
        raise InputError(f"non-finite value (NaN/Inf) in {name} at {where}")
    return W


def _beta_b(beta: torch.Tensor, B: int) -> torch.Tensor:
    """Broadcast beta to `[batch, head, 1, 1]`."""
    b = beta if beta.ndim == 2 else beta.unsqueeze(0).expand(B, -1)
    return b[:, :, None, None]


def scores(X: torch.Tensor, P: torch.Tensor | None, beta: torch.Tensor) -> torch.Tensor:
    """s^h_ij = beta_h x_i^T P_h x_j as `[batch, head, query, key]`."""
    B = X.shape[0]
    if P is None:
        G = X @ X.transpose(-1, -2)
        return _beta_b(beta, B) * G.unsqueeze(1)
    XP = torch.einsum("bnd,hde->bhne", X, P) if P.ndim == 3 else torch.einsum("bnd,bhde->bhne", X, P)
    return _beta_b(beta, B) * (XP @ X.transpose(-1, -2).unsqueeze(1))


def attention_from_scores(S: torch.Tensor, kind: str, mask: str) -> torch.Tensor:
    """Attention weights `[batch, head, query, key]` from scores: SA softmax or USA exp/n, masked."""
    n = S.shape[-1]
    causal = mask == "causal"
    if causal:
        keep = torch.ones(n, n, dtype=torch.bool, device=S.device).tril()
    if kind == "SA":
        if causal:
            S = S.masked_fill(~keep, float("-inf"))
        return torch.softmax(S, dim=-1)
    A = torch.exp(S) / n
    return A * keep if causal else A


def attention(X: torch.Tensor, P: torch.Tensor | None, spec: AttentionSpec) -> torch.Tensor:
    """Attention weights alpha^h_ij, `[batch, head, query, key]`, for unit tokens `X: [batch, token, dim]`."""
    return attention_from_scores(scores(X, P, spec.beta), spec.kind, spec.mask)


def drive_from_attention(X: torch.Tensor, A: torch.Tensor, V: torch.Tensor | None) -> torch.Tensor:
    """v_i = sum_h sum_j alpha^h_ij V_h x_j as `[batch, token, dim]`."""
    if V is None:
        return (A.sum(dim=1)) @ X
    AX = A @ X.unsqueeze(1)  # [b, h, n, d]
    if V.ndim == 3:
        return torch.einsum("bhnd,hed->bne", AX, V)
    return torch.einsum("bhnd,bhed->bne", AX, V)


def drive(X: torch.Tensor, P: torch.Tensor | None, V: torch.Tensor | None, spec: AttentionSpec) -> torch.Tensor:
    """The attention drive v(X), `[batch, token, dim]`."""
    return drive_from_attention(X, attention(X, P, spec), V)


def tangent(X: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """P^perp_{x_i} v_i = v_i - <x_i, v_i> x_i, `[batch, token, dim]`."""
    return v - (X * v).sum(-1, keepdim=True) * X


def velocity(X: torch.Tensor, P: torch.Tensor | None, V: torch.Tensor | None, spec: AttentionSpec) -> torch.Tensor:
    """The continuous-time field F(X) = P^perp_X v(X) (RST Eq. 5), `[batch, token, dim]`."""
    return tangent(X, drive(X, P, V, spec))


def check_usa_overflow(P: torch.Tensor | None, spec: AttentionSpec) -> None:
    """Reject USA runs with beta*||P||_2 > 700, which overflow exp in float64 (spec section 9)."""
    if spec.kind != "USA":
        return
    pn = torch.ones(1, dtype=torch.float64) if P is None else torch.linalg.matrix_norm(P, ord=2).reshape(-1)
    bound = float(spec.beta.max()) * float(pn.max())
    if bound > 700:
        raise InputError(
            f"USA with beta*||P|| = {bound:.1f} > 700 would overflow float64; lower beta or the scale of P"
        )
