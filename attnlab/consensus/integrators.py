"""Integrators on the product of spheres and the discrete layer maps (spec sections 3 and 5).

- `rk4`: projected RK4 on the ambient field F(X) = P^perp_X v(X), then X <- Y/||Y|| per token;
- `euler`: projected Euler Y = X + h F(X), then normalise;
- `exp_euler`: X <- cos(theta) X + sin(theta) U/theta with U = h F(X), theta = ||U|| per token;
- `postnorm`: RST Eq. 4, x_i <- pi(x_i + tau v_i(X)) with tau = h;
- `prenorm`: y_i <- y_i + tau v_i(pi(Y)); the stream is unnormalised, measures use pi(Y).

Piecewise-constant schedules use the weights of the step midpoint for all stages (spec Decision).
`guard` stops with `NumericalError` on a non-finite value or a pre-projection norm outside [1-delta, 1+delta].
States are `[batch, token, dim]` float64.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from attnlab.consensus import measures as M
from attnlab.consensus.dynamics import AttentionSpec, check_tokens, check_usa_overflow, check_weights, drive, tangent
from attnlab.consensus.names import METHODS
from attnlab.consensus.schedules import Schedule, check_schedule_step
from attnlab.errors import InputError, NumericalError, check_choice


@dataclass
class Trajectory:
    """Result of `integrate`: times `t` [steps+1], measures name -> `[batch, steps+1]` numpy arrays,
    recorded states `[batch, records, token, dim]` at `t_states`, the final state and why it stopped early."""

    t: np.ndarray
    measures: dict[str, np.ndarray]
    states: np.ndarray | None
    t_states: np.ndarray
    final: torch.Tensor
    stopped: str | None = None
    extra: dict = field(default_factory=dict)


class Field:
    """The field F(t, X) for a schedule and spec, with weights validated once per distinct (P, V) object."""

    def __init__(
        self, schedule: Schedule, spec: AttentionSpec, d: int, batch: int, device: torch.device | None = None
    ) -> None:
        self.device = torch.device("cpu") if device is None else torch.device(device)
        self.schedule, self.d, self.batch = schedule, d, batch
        self.spec = spec if self.device.type == "cpu" else spec.to(self.device)
        self._seen: dict[tuple[int, int], tuple] = {}

    def weights(self, t: float) -> tuple:
        P, V = self.schedule.weights(t)
        key = (id(P), id(V))
        if key not in self._seen:
            where = f"{self.schedule.name} schedule at t={t:g}"
            P2 = check_weights(P, f"P ({where})", self.d, self.spec.heads, self.batch)
            V2 = check_weights(V, f"V ({where})", self.d, self.spec.heads, self.batch)
            check_usa_overflow(P2, self.spec)
            if self.device.type != "cpu":  # checked on the cpu (the schedule's tensors), then copied once
                P2, V2 = (None if W is None else W.to(self.device) for W in (P2, V2))
            if len(self._seen) > 64:
                self._seen.clear()
            self._seen[key] = (P2, V2, P, V)  # keep P, V alive so ids stay unique
        return self._seen[key][:2]

    def drive(self, t: float, X: torch.Tensor) -> torch.Tensor:
        P, V = self.weights(t)
        return drive(X, P, V, self.spec)

    def __call__(self, t: float, X: torch.Tensor) -> torch.Tensor:
        return tangent(X, self.drive(t, X))


def guard(Y: torch.Tensor, t: float, h: float, F: torch.Tensor | None, delta: float | None) -> None:
    """Raise `NumericalError` if Y has a non-finite value or a token norm outside [1-delta, 1+delta]."""
    norms = Y.norm(dim=-1)
    bad = ~torch.isfinite(norms)
    kind = "a non-finite value"
    if not bad.any() and delta is not None:
        bad = (norms - 1).abs() > delta
        kind = f"a token norm outside [1-{delta:g}, 1+{delta:g}] before projection"
    if bad.any():
        b, i = bad.nonzero()[0].tolist()
        fmax = float(F.norm(dim=-1).max()) if F is not None and torch.isfinite(F).all() else float("inf")
        hint = f"; try h <= {0.1 / fmax:.3g}" if math.isfinite(fmax) and fmax > 0 else "; lower h"
        raise NumericalError(
            f"step size too large: {kind} at t={t:.4g}, h={h:g}, batch {b}, token {i}, max||F||={fmax:.3g}{hint}"
        )


def advance(method: str, field_: Field, t: float, X: torch.Tensor, h: float) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """The unprojected update of one step from (t, X): (Y, the field the guard reports, whether the norm band
    applies), all `[batch, token, dim]`; `project` finishes the step. No value is read back to the host."""
    pw = field_.schedule.piecewise
    tm = t + h / 2
    ts = (tm, tm, tm, tm) if pw else (t, t + h / 2, t + h / 2, t + h)
    if method == "rk4":
        k1 = field_(ts[0], X)
        k2 = field_(ts[1], X + h / 2 * k1)
        k3 = field_(ts[2], X + h / 2 * k2)
        k4 = field_(ts[3], X + h * k3)
        return X + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), k1, True
    if method == "euler":
        F = field_(ts[0], X)
        return X + h * F, F, True
    if method == "exp_euler":
        F = field_(ts[0], X)
        U = h * F
        th = U.norm(dim=-1, keepdim=True)
        small = th < 1e-12
        safe = torch.where(small, torch.ones_like(th), th)
        return torch.where(small, X + U, torch.cos(th) * X + torch.sin(th) * U / safe), F, True
    # postnorm (RST Eq. 4) and prenorm (the drive acts on pi(Y); the stream stays unnormalised). Off the cpu pi(Y)
    # skips unit()'s zero-token check (a read-back): a zero token gives NaN there, which the guard rejects
    if method == "prenorm":
        X_in = M.unit(X) if X.device.type == "cpu" else X / X.norm(dim=-1, keepdim=True)
    v = field_.drive(ts[0], X if method == "postnorm" else X_in)
    return X + h * v, v, False


def project(method: str, Y: torch.Tensor) -> torch.Tensor:
    """The state after the step: Y/||Y|| per token (prenorm keeps Y)."""
    return Y if method == "prenorm" else Y / Y.norm(dim=-1, keepdim=True)


def step(method: str, field_: Field, t: float, X: torch.Tensor, h: float, delta: float | None = 0.05) -> torch.Tensor:
    """One step of `method` from (t, X); returns the new state `[batch, token, dim]`."""
    Y, F, banded = advance(method, field_, t, X, h)
    guard(Y, t, h, F, delta if banded else None)
    if method == "postnorm":
        n = Y.norm(dim=-1, keepdim=True)
        if (n < 1e-12).any():
            b, i = (n[..., 0] < 1e-12).nonzero()[0].tolist()
            raise NumericalError(f"x + tau*v = 0 at t={t:.4g}, batch {b}, token {i}; the post-norm map is undefined")
        return Y / n
    return project(method, Y)


def step_ok(method: str, Y: torch.Tensor, banded: bool, delta: float | None) -> torch.Tensor:
    """Whether `step` would accept Y, as a 0-dim bool tensor on Y's device (nothing read back): every norm
    finite, inside [1-delta, 1+delta] where the band applies, and (postnorm) no zero token."""
    norms = Y.norm(dim=-1)
    ok = torch.isfinite(norms).all()
    if banded and delta is not None:
        ok = ok & ((norms - 1).abs() <= delta).all()
    if method == "postnorm":
        ok = ok & (norms >= 1e-12).all()
    return ok


def preflight(schedule: Schedule, spec: AttentionSpec, h: float) -> float:
    """Warn (do not stop) when h*sum||V_h|| (SA) or h*sum||V_h||e^{beta||P_h||} (USA) exceeds 0.5; returns it."""
    P, V = schedule.weights(0.0)
    H = spec.heads
    vn = (
        torch.ones(H, dtype=torch.float64)
        if V is None
        else torch.linalg.matrix_norm(torch.as_tensor(V, dtype=torch.float64), ord=2).reshape(-1, H).amax(0)
    )
    bound = float(vn.sum())
    if spec.kind == "USA":
        pn = (
            torch.ones(H, dtype=torch.float64)
            if P is None
            else torch.linalg.matrix_norm(torch.as_tensor(P, dtype=torch.float64), ord=2).reshape(-1, H).amax(0)
        )
        bound = float((vn * torch.exp(spec.beta.reshape(-1, H).amax(0) * pn)).sum())
    bound *= h
    if bound > 0.5:
        warnings.warn(
            f"step bound h*sum||V|| (x e^(beta||P||) for USA) = {bound:.3g} > 0.5; the run may blow up", stacklevel=2
        )
    return bound


HOST_MEASURES = ("cluster_count",)  # computed with scipy: on a cpu copy of the states
CHUNK_BYTES = 64 * 2**20  # the states (and Gram matrices) one deferred chunk holds on the device


@dataclass
class _Recorder:
    """Collects measures `[batch]` at every step and states `[batch, token, dim]` at k = 0, every `record_every`
    steps and the last step. `record_many` takes a chunk of consecutive states at once (one read-back)."""

    measures: tuple[str, ...]
    steps: int
    h: float
    record_every: int
    measure_kw: dict
    rows: dict[str, list[np.ndarray]] = field(default_factory=dict)
    states: list[np.ndarray] = field(default_factory=list)
    t_states: list[float] = field(default_factory=list)

    def _kept(self, k: int) -> bool:
        return k == 0 or k == self.steps or bool(self.record_every and k % self.record_every == 0)

    def record(self, k: int, Xk: torch.Tensor) -> None:
        for name, val in M.compute(self.measures, Xk, **self.measure_kw).items():
            self.rows.setdefault(name, []).append(val.numpy())
        if self._kept(k):
            self.states.append(Xk.numpy().copy())
            self.t_states.append(k * self.h)

    def record_many(self, k0: int, Xs: list[torch.Tensor]) -> None:
        """Record the states of steps k0, k0+1, ... (`Xs`, each `[batch, token, dim]`, on any device): the measures
        of the whole chunk in one batched call, copied to the host once."""
        if not Xs:
            return
        stack = torch.stack(Xs)  # [m, batch, token, dim]
        m, B = stack.shape[:2]
        flat = stack.reshape(m * B, *stack.shape[2:])
        on_device = tuple(n for n in self.measures if n not in HOST_MEASURES)
        vals = M.compute(on_device, flat, **self.measure_kw)
        host = tuple(n for n in self.measures if n in HOST_MEASURES)
        vals |= M.compute(host, flat.cpu(), **self.measure_kw) if host else {}
        for name in self.measures:
            self.rows.setdefault(name, []).extend(vals[name].reshape(m, B).cpu().numpy())
        kept = [i for i in range(m) if self._kept(k0 + i)]
        if kept:
            self.states.extend(stack[kept].cpu().numpy())
            self.t_states.extend((k0 + i) * self.h for i in kept)

    def trajectory(self, X: torch.Tensor, done: int, stopped: str | None) -> Trajectory:
        """The recorded run after `done` steps (the state where a stopped run ended is recorded too)."""
        if stopped and (not self.t_states or self.t_states[-1] != done * self.h):
            self.states.append(X.cpu().numpy().copy())
            self.t_states.append(done * self.h)
        return Trajectory(
            t=np.arange(done + 1) * self.h,
            measures={k: np.stack(self.rows.get(k, []), 1) for k in self.measures},
            states=np.stack(self.states, 1),
            t_states=np.array(self.t_states),
            final=X,
            stopped=stopped,
        )


def prepare(
    X0: torch.Tensor,
    schedule: Schedule,
    spec: AttentionSpec,
    t_max: float,
    h: float,
    method: str,
    device: torch.device | None = None,
) -> tuple[torch.Tensor, Field]:
    """Check the inputs of `integrate` (names, h, t_max, delta a multiple of h, tokens, the weights at t = 0 and
    USA overflow) on the cpu; returns the normalised start `[batch, token, dim]` on `device` and the field."""
    check_choice(method, METHODS, "integrator")
    if not (math.isfinite(h) and h > 0):
        raise InputError(f"step h must be finite and > 0, got {h}")
    if not (math.isfinite(t_max) and t_max > 0):
        raise InputError(f"t_max must be finite and > 0, got {t_max}")
    check_schedule_step(schedule, h)
    X = check_tokens(X0)
    field_ = Field(schedule, spec, X.shape[2], X.shape[0], device)
    field_.weights(0.0)
    return X.to(field_.device), field_


def chunk_steps(X: torch.Tensor, sync_every: int | None) -> int:
    """Steps per read-back: `sync_every`, or 1 on the cpu (each step checked at once, as always) and on another
    device as many as keep a chunk's states and Gram matrices under `CHUNK_BYTES` (at most 256)."""
    if sync_every is not None:
        return max(1, int(sync_every))
    if X.device.type == "cpu":
        return 1
    B, n, d = X.shape
    return int(min(256, max(1, CHUNK_BYTES // (8 * B * n * max(n, d)))))


def run_chunk(
    method: str, field_: Field, X: torch.Tensor, k0: int, k1: int, h: float, delta: float | None
) -> tuple[torch.Tensor, list[torch.Tensor], int | None]:
    """Steps k0..k1-1 without reading anything back: each step's acceptance (`step_ok`) is kept on the device and
    a rejected step freezes the state. One read-back at the end gives the first rejected step (None: all taken).
    Returns (state after the last accepted step, the states after each accepted step, first rejected step)."""
    ok = torch.ones((), dtype=torch.bool, device=X.device)
    oks: list[torch.Tensor] = []
    Xs: list[torch.Tensor] = []
    for k in range(k0, k1):
        Y, _, banded = advance(method, field_, k * h, X, h)
        ok = ok & step_ok(method, Y, banded, delta)
        X = torch.where(ok, project(method, Y), X)
        oks.append(ok)
        Xs.append(X)
    taken = int(torch.stack(oks).sum())  # the one read-back of the chunk (acceptance is monotone in k)
    bad = None if taken == k1 - k0 else k0 + taken
    return Xs[-1], Xs[:taken], bad  # Xs[-1]: the frozen state, that after the last accepted step


def integrate(
    X0: torch.Tensor,
    schedule: Schedule,
    spec: AttentionSpec,
    t_max: float,
    h: float,
    method: str = "rk4",
    measures: tuple[str, ...] = ("E_first", "E_pair"),
    record_every: int = 0,
    delta: float = 0.05,
    callback: Callable[[int, float, torch.Tensor], None] | None = None,
    progress: bool = False,
    stop_on_error: bool = False,
    device: torch.device | None = None,
    sync_every: int | None = None,
    **measure_kw,
) -> Trajectory:
    """Integrate from `X0` `[batch, token, dim]` to `t_max` with step `h`; record `measures` every step and the
    state every `record_every` steps (0: only start and end). With `stop_on_error` a `NumericalError` ends the
    run early and is reported in `Trajectory.stopped` (partial results kept); otherwise it propagates.
    `device`: where the states are integrated (X0 and the schedule's weights are copied there; float64 kept).
    `sync_every`: steps between read-backs (`chunk_steps`); the results do not depend on it."""
    X, field_ = prepare(X0, schedule, spec, t_max, h, method, device)
    preflight(schedule, spec, h)
    steps = int(round(t_max / h))
    rec = _Recorder(measures, steps, h, record_every, measure_kw)
    chunk = chunk_steps(X, sync_every)
    if chunk == 1:
        rec.record(0, X)
    else:
        rec.record_many(0, [X])
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=steps, desc=f"{method} t<={t_max:g}", leave=False)
    done, stopped = 0, None
    while done < steps and stopped is None:
        k1 = min(steps, done + chunk)
        X, stopped, Xs = _advance_chunk(method, field_, X, done, k1, h, delta, chunk, stop_on_error)
        if chunk == 1 and Xs:
            rec.record(done + 1, Xs[0])
        else:
            rec.record_many(done + 1, Xs)
        if callback is not None:
            for i, Xk in enumerate(Xs):
                callback(done + 1 + i, (done + 1 + i) * h, Xk)
        done += len(Xs)
        if bar is not None:
            bar.update(len(Xs))
    if bar is not None:
        bar.close()
    return rec.trajectory(X, done, stopped)


def _advance_chunk(
    method: str, field_: Field, X: torch.Tensor, k0: int, k1: int, h: float, delta: float | None, chunk: int,
    stop_on_error: bool,
) -> tuple[torch.Tensor, str | None, list[torch.Tensor]]:  # fmt: skip
    """Steps k0..k1-1: one checked `step` (chunk 1), or a deferred `run_chunk` whose first rejected step is taken
    again by `step` so that it raises the very error a checked run raises. Returns (state, why it stopped, the
    states after each accepted step)."""
    Xs: list[torch.Tensor] = []
    try:
        if chunk == 1:
            Xs = [step(method, field_, k0 * h, X, h, delta)]
            return Xs[0], None, Xs
        X, Xs, bad = run_chunk(method, field_, X, k0, k1, h, delta)
        if bad is not None:
            step(method, field_, bad * h, X, h, delta)  # raises the checked step's NumericalError
            raise NumericalError(f"step size too large: a rejected step at t={bad * h:.4g}, h={h:g}; lower h")
        return X, None, Xs
    except NumericalError as exc:
        if not stop_on_error:
            raise
        return X, str(exc), Xs
