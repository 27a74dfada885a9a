"""The deep multi-head attention network with attention from the bare input (spec §3, paper Eqs 1-4).

Layout: inputs `x: [example, token, feature]`; attention `attn: [example, head, query, key]` with rows summing to 1
(the maths' Omega = attn^T). Paths pi = (h_1..h_L), flat index pi = sum_l h_l prod_{k>l} H_k (h_1 slowest).
Weights: `V0: [N_1, N0]`, `V[l]: [H_l, N_{l+2}, N_{l+1}]` (layer l+1 in maths, output width next), `a: [N_a]`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from attnlab.errors import check

READOUTS = ("last", "mean", "first")
HEAD_KINDS = ("bilinear", "qk", "precomputed")


@dataclass
class HeadSpec:
    """One attention head. `bilinear`: W [N0, N0], score_{ts} = x_t^T W x_s (t key, s query).
    `qk`: Q, K [d_qk, N0], score_{ts} = (K x_t).(Q x_s)/sqrt(d_qk). `precomputed`: maps [P, n_tok, n_tok]
    (query, key), treated as fixed (residual and MLP routes of a real transformer are ignored)."""

    kind: str
    W: np.ndarray | None = None
    Q: np.ndarray | None = None
    K: np.ndarray | None = None
    maps: np.ndarray | None = None
    name: str = ""


@dataclass
class PathConfig:
    """Architecture: `layers[l]` is the list of heads of layer l+1; `widths` = (N_1..N_L, N_a) (L+1 entries,
    positive ints or inf); `variances` = (sigma0^2, sigma_1^2..sigma_L^2, sigma_a^2) (L+2 entries)."""

    layers: list[list[HeadSpec]]
    widths: tuple[float, ...] = ()
    variances: tuple[float, ...] = ()
    readout: str = "last"
    head_names: list[list[str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        L = len(self.layers)
        check(L >= 1, f"layers: need L >= 1 layers, got {L}")
        for l, heads in enumerate(self.layers):
            check(len(heads) >= 1, f"layers[{l}]: need H_l >= 1 heads, got 0")
            for h in heads:
                check(h.kind in HEAD_KINDS, f"head kind must be one of {HEAD_KINDS}, got {h.kind!r}")
        if not self.widths:
            self.widths = tuple([10.0] * (L + 1))
        if not self.variances:
            self.variances = tuple([1.0] * (L + 2))
        check(len(self.widths) == L + 1, f"widths: need L+1 = {L + 1} entries (N_1..N_L, N_a), got {len(self.widths)}")
        check(len(self.variances) == L + 2, f"variances: need L+2 = {L + 2} entries, got {len(self.variances)}")
        for w in self.widths:
            check(
                w > 0 and (math.isinf(w) or float(w).is_integer()),
                f"widths: each must be a positive integer or inf, got {w}",
            )
        for v in self.variances:
            check(np.isfinite(v) and v > 0, f"variances: each must be > 0, got {v}")
        check(self.readout in READOUTS, f"readout must be one of {READOUTS}, got {self.readout!r}")
        if not self.head_names:
            self.head_names = [
                [h.name or f"L{l + 1}H{i}" for i, h in enumerate(hs)] for l, hs in enumerate(self.layers)
            ]

    @property
    def L(self) -> int:
        return len(self.layers)

    @property
    def H(self) -> list[int]:
        return [len(hs) for hs in self.layers]

    @property
    def n_paths(self) -> int:
        return int(np.prod(self.H))

    def partial_sizes(self) -> list[int]:
        """n_l = prod_{k>=l} H_k for l = 1..L, then 1 for the readout (L+1 entries)."""
        return [int(np.prod(self.H[l:])) for l in range(self.L)] + [1]

    def path_names(self) -> list[str]:
        """Names like 'good>uniform', in flat path order (h_1 slowest)."""
        names = [""]
        for l in reversed(range(self.L)):
            names = [
                f"{self.head_names[l][h]}" + (f">{rest}" if rest else "") for h in range(self.H[l]) for rest in names
            ]
        return names

    def with_widths(self, N: float) -> PathConfig:
        """A copy with every width set to N."""
        return PathConfig(self.layers, tuple([float(N)] * (self.L + 1)), self.variances, self.readout, self.head_names)


def _check_x(x: torch.Tensor) -> None:
    check(x.ndim == 3, f"x: expected shape [P, n_tok, N0], got {tuple(x.shape)}")
    check(bool(torch.isfinite(x).all()), "x: contains NaN or Inf")


def head_attention(head: HeadSpec, x: torch.Tensor) -> torch.Tensor:
    """Attention of one head from the bare input x [P, n_tok, N0] -> [P, query, key], rows summing to 1."""
    N0 = x.shape[-1]
    if head.kind == "bilinear":
        W = torch.as_tensor(head.W, dtype=x.dtype)
        check(tuple(W.shape) == (N0, N0), f"bilinear W: expected [N0, N0] = [{N0}, {N0}], got {tuple(W.shape)}")
        score = torch.einsum("ptd,de,pse->pst", x, W, x)  # [P, query s, key t]
    elif head.kind == "qk":
        Q = torch.as_tensor(head.Q, dtype=x.dtype)
        K = torch.as_tensor(head.K, dtype=x.dtype)
        check(
            Q.shape == K.shape and Q.ndim == 2 and Q.shape[1] == N0,
            f"qk heads: Q and K must be [d_qk, N0={N0}], got {tuple(Q.shape)} and {tuple(K.shape)}",
        )
        score = torch.einsum("psd,ptd->pst", x @ Q.T, x @ K.T) / math.sqrt(Q.shape[0])
    else:
        maps = torch.as_tensor(head.maps, dtype=x.dtype)
        P, n = x.shape[0], x.shape[1]
        check(
            tuple(maps.shape) == (P, n, n),
            f"precomputed maps: expected [P, n_tok, n_tok] = [{P}, {n}, {n}], got {tuple(maps.shape)}",
        )
        check(bool((maps.sum(-1) - 1).abs().max() < 1e-10), "precomputed maps: rows must sum to 1 within 1e-10")
        return maps
    return torch.softmax(score, dim=-1)


def readout_vector(kind: str, n_tok: int, dtype=torch.float64) -> torch.Tensor:
    """r [n_tok]: e_last, 1/n_tok or e_first (spec N3)."""
    r = torch.zeros(n_tok, dtype=dtype)
    if kind == "last":
        r[-1] = 1.0
    elif kind == "first":
        r[0] = 1.0
    else:
        r[:] = 1.0 / n_tok
    return r


class PathNetwork:
    """The network [N1-N4] and its path decomposition [N5-N8]."""

    def __init__(self, cfg: PathConfig) -> None:
        self.cfg = cfg

    def attention(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Per layer, [P, H_l, query, key] float64 attention computed from the raw x (never from x^(l-1))."""
        x = torch.as_tensor(x, dtype=torch.float64)
        _check_x(x)
        return [torch.stack([head_attention(h, x) for h in heads], dim=1) for heads in self.cfg.layers]

    def paths(self, x: torch.Tensor, attn: list[torch.Tensor] | None = None) -> torch.Tensor:
        """xi^pi(x) = x Omega^(1)h_1 ... Omega^(L)h_L r  ->  [P, n_paths, N0] (spec N5)."""
        x = torch.as_tensor(x, dtype=torch.float64)
        attn = self.attention(x) if attn is None else attn
        P, n_tok, _ = x.shape
        w = readout_vector(self.cfg.readout, n_tok).expand(P, 1, n_tok)  # [P, partial path, token]
        for l in reversed(range(self.cfg.L)):
            w = torch.einsum("phst,prs->phrt", attn[l], w).reshape(P, -1, n_tok)
        return torch.einsum("ptd,prt->prd", x, w)

    def init_weights(self, N0: int, generator: torch.Generator | None = None) -> dict:
        """Prior draws: V0 [N_1, N0], V[l] [H_l, N_{l+1}, N_l], a [N_a] (finite widths only)."""
        cfg = self.cfg
        Ns = [int(w) for w in cfg.widths]
        sd = [math.sqrt(v) for v in cfg.variances]
        V0 = sd[0] * torch.randn(Ns[0], N0, generator=generator, dtype=torch.float64)
        V = [
            sd[l + 1] * torch.randn(cfg.H[l], Ns[l + 1], Ns[l], generator=generator, dtype=torch.float64)
            for l in range(cfg.L)
        ]
        a = sd[-1] * torch.randn(Ns[-1], generator=generator, dtype=torch.float64)
        return {"V0": V0, "V": V, "a": a}

    def forward(self, x: torch.Tensor, weights: dict, attn: list[torch.Tensor] | None = None) -> torch.Tensor:
        """f(x) [P] by the layer recursion [N1-N4] (no residuals, nonlinearities or normalisation)."""
        x = torch.as_tensor(x, dtype=torch.float64)
        attn = self.attention(x) if attn is None else attn
        N0 = x.shape[-1]
        h = torch.einsum("ij,ptj->pit", weights["V0"], x) / math.sqrt(N0)  # [P, N_1, token]
        for l in range(self.cfg.L):
            V = weights["V"][l]  # [H, N_out, N_in]
            y = torch.einsum("pjt,phst->phjs", h, attn[l])
            h = torch.einsum("hij,phjs->pis", V, y) / math.sqrt(self.cfg.H[l] * V.shape[2])
        xbar = h @ readout_vector(self.cfg.readout, x.shape[1])
        a = weights["a"]
        return xbar @ a / math.sqrt(a.shape[0])

    def partial_weights(self, weights: dict) -> list[torch.Tensor]:
        """W_l for l = 1..L (rows = partial paths (h_l..h_L), columns N_l), built top-down (spec N6).
        W_1 = V_eff [n_paths, N_1]. Works batched: V[l] [..., H, N_out, N_in], a [..., N_a]."""
        a = weights["a"]
        W = a.unsqueeze(-2)  # [..., 1, N_a]
        out = []
        for l in reversed(range(self.cfg.L)):
            V = weights["V"][l]
            Wn = torch.einsum("...rj,...hjk->...hrk", W, V) / math.sqrt(V.shape[-2])
            W = Wn.reshape(*Wn.shape[:-3], -1, Wn.shape[-1])
            out.append(W)
        return out[::-1]

    def effective_weights(self, weights: dict) -> torch.Tensor:
        """V_eff [n_paths, N_1] (spec N6)."""
        return self.partial_weights(weights)[0]

    def forward_paths(self, x: torch.Tensor, weights: dict) -> torch.Tensor:
        """f(x) [P] by the path form [N7]: sum_pi V_eff^pi V0 xi^pi / sqrt(N_1 N0 n_paths)."""
        xi = self.paths(x)
        Veff = self.effective_weights(weights)
        N1, N0 = weights["V0"].shape
        return torch.einsum("rj,ji,pri->p", Veff, weights["V0"], xi) / math.sqrt(N1 * N0 * self.cfg.n_paths)

    def order_parameters(self, weights: dict) -> tuple[list[torch.Tensor], torch.Tensor]:
        """([U_1..U_L], U_a) with U_l = W_l W_l^T / N_l and U_a = |a|^2/N_a (spec N8); batched over leading dims."""
        Ws = self.partial_weights(weights)
        Us = [W @ W.transpose(-1, -2) / W.shape[-1] for W in Ws]
        a = weights["a"]
        return Us, (a * a).sum(-1) / a.shape[-1]
