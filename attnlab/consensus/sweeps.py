"""The (t, beta) phase diagram (spec sections 4.5 and 11, B2).

For Q = K = V = I and SA with a full mask, integrate a batch of starts for every beta with projected Euler
(default, h = 0.1, as in GLPR's diagrams) or RK4, and record the clustered fraction (pairs with cosine >= 0.999)
at every step. The betas are processed in chunks so each score tensor `[chunk*starts, n, n]` stays under
`max_bytes`. All betas share the same starts (seeded), so the diagram is comparable across beta.

Speed (issue 13): Euler chunks are small (4 MiB of scores by default) and reuse a handful of buffers in place
(`out=` and in-place operations in the same order as `_field_identity`, so every value is bit-identical to the
plain formulation, tested in tests/consensus/test_phase_fast.py); finiteness is read from the sum of the token
norms the projection computes anyway, once per step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from attnlab.consensus import measures as M
from attnlab.consensus.dynamics import check_tokens, tangent
from attnlab.consensus.theory import t_equiangular
from attnlab.errors import InputError, NumericalError, check_choice


@dataclass(frozen=True)
class Sweep:
    """What a phase diagram integrates, the same for every beta (and every beta chunk): `starts` uniform starts
    (seeded by `seed`, drawn in float64, integrated in `dtype`) of `n` tokens on S^{d-1}, to `t_max` in steps of `h`
    by `method` ("euler" or "rk4") for attention `kind` ("SA" or "USA"), clustered at cosine >= `theta`."""

    n: int = 32
    d: int = 8
    starts: int = 256
    t_max: float = 30.0
    h: float = 0.1
    method: str = "euler"
    kind: str = "SA"
    seed: int = 0
    theta: float = 0.999
    dtype: torch.dtype = torch.float64

    @property
    def steps(self) -> int:
        return int(round(self.t_max / self.h))


@dataclass
class PhaseDiagram:
    """`frac` [beta, steps+1] mean clustered fraction, `t` [steps+1], `betas` [beta], `t50` [beta] (first time the
    mean fraction reaches 0.5, nan if never), `t_eq` [beta] from the rho-ODE."""

    betas: np.ndarray
    t: np.ndarray
    frac: np.ndarray
    t50: np.ndarray
    t_eq: np.ndarray


def _field_identity(X: torch.Tensor, beta: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """F(X) for P = V = I, full mask, per-item beta `[batch]`; also the cosine matrix. Uses G <= 1 so
    exp(beta (G - 1)) never overflows (SA weights are invariant to the shift)."""
    G = X @ X.transpose(-1, -2)
    b = beta[:, None, None]
    if kind == "SA":
        A = (G - 1).mul_(b).exp_()  # in place on one temporary: exp is the dominant cost
        A = A.div_(A.sum(-1, keepdim=True))
    else:
        A = (G * b).exp_().div_(X.shape[1])
    return tangent(X, A @ X), G


def first_crossing(t: np.ndarray, y: np.ndarray, level: float = 0.5) -> float:
    """First time y(t) >= level (linear interpolation), nan if never."""
    idx = np.nonzero(y >= level)[0]
    if idx.size == 0:
        return float("nan")
    k = int(idx[0])
    if k == 0:
        return float(t[0])
    y0, y1 = y[k - 1], y[k]
    return float(t[k - 1] + (level - y0) / (y1 - y0) * (t[k] - t[k - 1]))


def _check_sweep(betas: np.ndarray, sweep: Sweep) -> np.ndarray:
    """Validate the sweep's inputs; returns the betas as a float64 vector."""
    t_max, h, method, kind = sweep.t_max, sweep.h, sweep.method, sweep.kind
    check_choice(method, ("euler", "rk4"), "sweep integrator")
    check_choice(kind, ("SA", "USA"), "attention kind")
    betas = np.asarray(betas, dtype=np.float64)
    if betas.ndim != 1 or betas.size == 0 or not np.isfinite(betas).all() or (betas < 0).any():
        raise InputError("betas must be a non-empty list of finite values >= 0")
    if kind == "USA" and betas.max() > 700:
        raise InputError(f"USA with beta = {betas.max():g} > 700 would overflow float64")
    if not (h > 0 and t_max > 0 and math.isfinite(h) and math.isfinite(t_max)):
        raise InputError(f"need finite h > 0 and t_max > 0, got h={h}, t_max={t_max}")
    return betas


def _step(X: torch.Tensor, F: torch.Tensor, beta: torch.Tensor, h: float, method: str, kind: str) -> torch.Tensor:
    """One projected Euler or RK4 step from X `[batch, n, d]` with F = F(X) already computed."""
    if method == "euler":
        Y = X + h * F
    else:
        k2 = _field_identity(X + h / 2 * F, beta, kind)[0]
        k3 = _field_identity(X + h / 2 * k2, beta, kind)[0]
        k4 = _field_identity(X + h * k3, beta, kind)[0]
        Y = X + h / 6 * (F + 2 * k2 + 2 * k3 + k4)
    return Y


def _sweep_chunk(X0: torch.Tensor, bs: np.ndarray, sweep: Sweep, retire: bool) -> np.ndarray:
    """Mean clustered fraction `[len(bs), steps+1]` for the betas `bs`, all from the starts X0 `[starts, n, d]`;
    with `retire`, starts inside the cap of half the angle of `theta` stop being integrated (fraction 1)."""
    starts = X0.shape[0]
    frac = np.zeros((len(bs), sweep.steps + 1))
    X = X0.repeat(len(bs), 1, 1)
    beta = torch.tensor(bs, dtype=X0.dtype).repeat_interleave(starts)
    owner = torch.arange(len(bs)).repeat_interleave(starts)  # beta index of each active start
    if sweep.method == "euler":
        _euler_chunk(X, beta, owner, frac, sweep, retire)
    else:
        _rk4_chunk(X, beta, owner, frac, sweep)
    return frac


def sweep_chunk_resident(X0: torch.Tensor, bs: np.ndarray, sweep: Sweep) -> np.ndarray:
    """`_sweep_chunk` for a GPU: the same fractions `[len(bs), steps+1]`, with every start integrated to the end (no
    retirement: it would read a mask back each step; by the hemisphere theorem a retired start's fraction is 1 either
    way), the fractions kept on X0's device and read back once, and the finiteness check deferred to the end (the
    first non-finite step is still named). Runs on any device; the GPU path of `phase_diagram`."""
    starts, nb, dev = X0.shape[0], len(bs), X0.device
    steps, h, method, kind, theta = sweep.steps, sweep.h, sweep.method, sweep.kind, sweep.theta
    X = X0.repeat(nb, 1, 1)
    beta = torch.tensor(bs, dtype=X0.dtype, device=dev).repeat_interleave(starts)
    frac = torch.empty(nb, steps + 1, dtype=torch.float64, device=dev)
    finite = torch.ones((), dtype=torch.bool, device=dev)
    first_bad = torch.full((), steps, dtype=torch.long, device=dev)
    for k in range(steps + 1):
        F, G = _field_identity(X, beta, kind)
        frac[:, k] = M.clustered_fraction_from_gram(G, theta).view(nb, starts).mean(1)
        if k == steps:
            break
        Y = _step(X, F, beta, h, method, kind)
        norm = Y.norm(dim=-1, keepdim=True)
        ok = torch.isfinite(norm.sum())
        first_bad = torch.where(finite & ~ok, torch.full_like(first_bad, k), first_bad)
        finite = finite & ok
        X = Y / norm
    if not bool(finite):
        raise NumericalError(f"phase diagram: non-finite state at t={int(first_bad) * h:.4g}, h={h:g}; lower h")
    return frac.cpu().numpy()


def _record(frac: np.ndarray, k: int, owner: torch.Tensor, cf: torch.Tensor, done: np.ndarray, starts: int) -> None:
    """frac[:, k] = (sum of the clustered fractions `cf` [active] per beta + retired starts) / starts."""
    sums = np.bincount(owner.numpy(), weights=cf.double().numpy(), minlength=frac.shape[0])
    frac[:, k] = (sums + done) / starts


def _rk4_chunk(X: torch.Tensor, beta: torch.Tensor, owner: torch.Tensor, frac: np.ndarray, sweep: Sweep) -> None:
    """Projected RK4 for every start `X` [batch, n, d]; fills `frac` [betas, steps+1] (no retirement)."""
    steps, starts, done = frac.shape[1] - 1, X.shape[0] // frac.shape[0], np.zeros(frac.shape[0])
    h, kind, theta = sweep.h, sweep.kind, sweep.theta
    for k in range(steps + 1):
        F, G = _field_identity(X, beta, kind)
        _record(frac, k, owner, M.clustered_fraction_from_gram(G, theta), done, starts)
        if k == steps:
            break
        Y = _step(X, F, beta, h, "rk4", kind)
        if not torch.isfinite(Y).all():
            raise NumericalError(f"phase diagram: non-finite state at t={k * h:.4g}, h={h:g}; lower h")
        X = Y / Y.norm(dim=-1, keepdim=True)


class _EulerBuffers:
    """Work tensors of one chunk's projected Euler loop, allocated once at the largest batch `m` and used as
    leading views `[:m]` while starts retire (small, reused buffers: no page faults from fresh temporaries)."""

    def __init__(self, m: int, n: int, d: int, dtype: torch.dtype) -> None:
        self.G = torch.empty(m, n, n, dtype=dtype)  # Gram, then weights in place
        self.hit = torch.empty(m, n, n, dtype=torch.bool)
        self.row = torch.empty(m, n, 1, dtype=dtype)  # row sums, <x_i, v_i>, norms
        self.V = torch.empty(m, n, d, dtype=dtype)  # A X, then F, then h F
        self.XV = torch.empty(m, n, d, dtype=dtype)  # X * V, then <x_i, v_i> x_i
        self.Y = torch.empty(m, n, d, dtype=dtype)

    def view(self, m: int) -> tuple[torch.Tensor, ...]:
        return self.G[:m], self.hit[:m], self.row[:m], self.V[:m], self.XV[:m], self.Y[:m]


def _euler_field(
    X: torch.Tensor, b: torch.Tensor, kind: str, theta: float, w: tuple[torch.Tensor, ...]
) -> torch.Tensor:
    """The clustered fraction `[m]` of X `[m, n, d]` and h-free F(X) in `w`'s V buffer, with the same operations
    (and so the same rounding) as `_field_identity` and `clustered_fraction_from_gram`, written into `w`."""
    G, hit, row, V, XV, _ = w
    n = X.shape[1]
    torch.bmm(X, X.transpose(-1, -2), out=G)
    torch.ge(G, theta, out=hit)
    diagonal_hits = (torch.diagonal(G, dim1=-2, dim2=-1) >= theta).sum(-1)
    hits = hit.view(X.shape[0], n * n).sum(-1).to(torch.float64) - diagonal_hits  # integers: any order is exact
    cf = hits / (n * (n - 1))
    if kind == "SA":
        G.sub_(1).mul_(b).exp_()
        G.div_(torch.sum(G, -1, keepdim=True, out=row))
    else:
        G.mul_(b).exp_().div_(n)
    torch.bmm(G, X, out=V)  # v = A X
    torch.mul(X, V, out=XV)
    torch.sum(XV, -1, keepdim=True, out=row)
    torch.mul(row, X, out=XV)
    V.sub_(XV)  # F = v - <x, v> x
    return cf


def _euler_chunk(
    X: torch.Tensor, beta: torch.Tensor, owner: torch.Tensor, frac: np.ndarray, sweep: Sweep, retire: bool
) -> None:
    """Projected Euler X <- (X + h F) / ||X + h F|| for every start `X` [batch, n, d] in place; fills `frac`
    [betas, steps+1]. Finiteness is read from the sum of the token norms (one small reduction per step)."""
    steps, starts, done = frac.shape[1] - 1, X.shape[0] // frac.shape[0], np.zeros(frac.shape[0])
    h, kind, theta = sweep.h, sweep.kind, sweep.theta
    cap = math.cos(math.acos(theta) / 2)
    m, n, d = X.shape
    buf = _EulerBuffers(m, n, d, X.dtype)
    b = beta[:, None, None]
    for k in range(steps + 1):
        w = buf.view(X.shape[0])
        _record(frac, k, owner, _euler_field(X, b, kind, theta, w), done, starts)
        if k == steps:
            break
        _, _, row, V, _, Y = w
        torch.add(X, V.mul_(h), out=Y)
        torch.linalg.vector_norm(Y, dim=-1, keepdim=True, out=row)
        if not math.isfinite(float(row.sum())):
            raise NumericalError(f"phase diagram: non-finite state at t={k * h:.4g}, h={h:g}; lower h")
        torch.div(Y, row, out=X)
        if retire:
            inside = _inside_cap(X, cap)
            if inside.any():
                done += np.bincount(owner[inside].numpy(), minlength=len(done))
                keep = ~inside
                X, beta, owner = X[keep], beta[keep], owner[keep]
                b = beta[:, None, None]
                if X.shape[0] == 0:
                    frac[:, k + 1 :] = 1.0
                    break


GPU_CHUNK_BYTES = 2 << 30  # Gram matrices of one GPU chunk (its temporaries take a few times more)


def _phase_on(X0: torch.Tensor, betas: np.ndarray, sweep: Sweep) -> PhaseDiagram:
    """`phase_diagram` on X0's (GPU) device: large beta chunks by `sweep_chunk_resident`."""
    chunk = max(1, int(GPU_CHUNK_BYTES // (X0.shape[0] * sweep.n * sweep.n * X0.element_size())))
    frac = np.concatenate(
        [sweep_chunk_resident(X0, betas[c0 : c0 + chunk], sweep) for c0 in range(0, betas.size, chunk)]
    )
    return _diagram(betas, frac, sweep)


def _diagram(betas: np.ndarray, frac: np.ndarray, sweep: Sweep) -> PhaseDiagram:
    """The diagram of the fractions `frac` [beta, steps+1]: its times, t50 and the rho-ODE's t_eq."""
    t = np.arange(sweep.steps + 1) * sweep.h
    t50 = np.array([first_crossing(t, f) for f in frac])
    t_eq = np.array([t_equiangular(float(b), sweep.n, sweep.kind) for b in betas])
    return PhaseDiagram(betas=betas, t=t, frac=frac, t50=t50, t_eq=t_eq)


def _inside_cap(X: torch.Tensor, cap: float) -> torch.Tensor:
    """Starts `[batch]` whose tokens all lie in the cap <w, x_i> >= cap around their mean direction w."""
    w = X.mean(1)
    w = w / w.norm(dim=-1, keepdim=True)
    return (X * w.unsqueeze(1)).sum(-1).amin(-1) >= cap


def phase_diagram(
    betas: np.ndarray,
    sweep: Sweep | None = None,
    *,
    max_bytes: int = 4 * 2**20,
    retire: bool = True,
    progress: bool = False,
    map_chunks: Callable[[Callable[..., np.ndarray], list[tuple]], list[np.ndarray]] | None = None,
    device: torch.device | None = None,
    **fields: Any,
) -> PhaseDiagram:
    """Mean clustered fraction over `sweep.starts` uniform starts on S^{d-1}, for each beta and time step.

    `fields`: `Sweep` fields by keyword, over `sweep` (default `Sweep()`): `phase_diagram(betas, n=8, starts=16)` is
    `phase_diagram(betas, Sweep(n=8, starts=16))`. The other keywords say how to run it and change no value:
    `max_bytes` bounds each cpu chunk's scores `[chunk*starts, n, n]`.
    With `retire` (Euler and SA only) a start stops being integrated once all its tokens lie in the cap
    <w, x_i> >= cos(arccos(theta)/2) around their mean direction w: by the hemisphere theorem (spec 4.2, exact for
    projected Euler with h <= 1, tested in R2a) they stay in that cap, so every pair keeps cosine >= theta and the
    start's clustered fraction is 1 from then on. This changes no value of `frac`; it only skips work.
    `map_chunks(fn, [args...])`, when given, runs the beta chunks elsewhere (e.g. `attnlab.core.parallel`'s Ray tasks).
    A CUDA `device` integrates there with `sweep_chunk_resident` (the starts are drawn on the cpu, as always, so
    both devices start from the same points) in chunks of up to `GPU_CHUNK_BYTES` of Gram matrices.
    """
    sweep = replace(sweep or Sweep(), **fields)
    betas = _check_sweep(betas, sweep)
    starts, n, d = sweep.starts, sweep.n, sweep.d
    g = torch.Generator().manual_seed(sweep.seed)
    X0 = check_tokens(torch.randn(starts, n, d, generator=g, dtype=torch.float64)).to(sweep.dtype)
    if device is not None and device.type != "cpu":
        return _phase_on(X0.to(device), betas, sweep)
    chunk = max(1, int(max_bytes // (starts * n * n * 8)))
    frac = np.zeros((betas.size, sweep.steps + 1))
    chunks: Iterable[int] = range(0, betas.size, chunk)
    if progress:
        from tqdm import tqdm

        chunks = tqdm(chunks, desc="phase diagram (beta chunks)", leave=False)
    retire = retire and sweep.method == "euler" and sweep.kind == "SA" and sweep.h <= 1.0
    if map_chunks is not None:
        jobs = [(X0, betas[c0 : c0 + chunk], sweep, retire) for c0 in chunks]
        frac = np.concatenate(map_chunks(_sweep_chunk, jobs), axis=0)
    else:
        for c0 in chunks:
            bs = betas[c0 : c0 + chunk]
            frac[c0 : c0 + len(bs)] = _sweep_chunk(X0, bs, sweep, retire)
    return _diagram(betas, frac, sweep)
