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
from collections.abc import Callable, Iterable
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

    def __init__(self, schedule: Schedule, spec: AttentionSpec, d: int, batch: int) -> None:
        self.schedule, self.spec, self.d, self.batch = schedule, spec, d, batch
        self._seen: dict[tuple[int, int], tuple] = {}

    def weights(self, t: float) -> tuple:
        P, V = self.schedule.weights(t)
        key = (id(P), id(V))
        if key not in self._seen:
            where = f"{self.schedule.name} schedule at t={t:g}"
            P2 = check_weights(P, f"P ({where})", self.d, self.spec.heads, self.batch)
            V2 = check_weights(V, f"V ({where})", self.d, self.spec.heads, self.batch)
            check_usa_overflow(P2, self.spec)
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


def step(method: str, field_: Field, t: float, X: torch.Tensor, h: float, delta: float | None = 0.05) -> torch.Tensor:
    """One step of `method` from (t, X); returns the new state `[batch, token, dim]`."""
    pw = field_.schedule.piecewise
    tm = t + h / 2
    ts = (tm, tm, tm, tm) if pw else (t, t + h / 2, t + h / 2, t + h)
    if method == "rk4":
        k1 = field_(ts[0], X)
        k2 = field_(ts[1], X + h / 2 * k1)
        k3 = field_(ts[2], X + h / 2 * k2)
        k4 = field_(ts[3], X + h * k3)
        Y = X + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        guard(Y, t, h, k1, delta)
        return Y / Y.norm(dim=-1, keepdim=True)
    if method == "euler":
        F = field_(ts[0], X)
        Y = X + h * F
        guard(Y, t, h, F, delta)
        return Y / Y.norm(dim=-1, keepdim=True)
    if method == "exp_euler":
        F = field_(ts[0], X)
        U = h * F
        th = U.norm(dim=-1, keepdim=True)
        small = th < 1e-12
        safe = torch.where(small, torch.ones_like(th), th)
        Y = torch.where(small, X + U, torch.cos(th) * X + torch.sin(th) * U / safe)
        guard(Y, t, h, F, delta)
        return Y / Y.norm(dim=-1, keepdim=True)
    if method == "postnorm":
        v = field_.drive(ts[0], X)
        Y = X + h * v
        guard(Y, t, h, v, None)
        n = Y.norm(dim=-1, keepdim=True)
        if (n < 1e-12).any():
            b, i = (n[..., 0] < 1e-12).nonzero()[0].tolist()
            raise NumericalError(f"x + tau*v = 0 at t={t:.4g}, batch {b}, token {i}; the post-norm map is undefined")
        return Y / n
    # prenorm: the stream Y is unnormalised; the drive acts on pi(Y)
    v = field_.drive(ts[0], M.unit(X))
    Y = X + h * v
    guard(Y, t, h, v, None)
    return Y


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


@dataclass
class _Recorder:
    """Collects measures `[batch]` at every step and states `[batch, token, dim]` at k = 0, every `record_every`
    steps and the last step."""

    measures: tuple[str, ...]
    steps: int
    h: float
    record_every: int
    measure_kw: dict
    rows: dict[str, list[np.ndarray]] = field(default_factory=dict)
    states: list[np.ndarray] = field(default_factory=list)
    t_states: list[float] = field(default_factory=list)

    def record(self, k: int, Xk: torch.Tensor) -> None:
        for name, val in M.compute(self.measures, Xk, **self.measure_kw).items():
            self.rows.setdefault(name, []).append(val.numpy())
        if k == 0 or k == self.steps or (self.record_every and k % self.record_every == 0):
            self.states.append(Xk.numpy().copy())
            self.t_states.append(k * self.h)

    def trajectory(self, X: torch.Tensor, done: int, stopped: str | None) -> Trajectory:
        """The recorded run after `done` steps (the state where a stopped run ended is recorded too)."""
        if stopped and (not self.t_states or self.t_states[-1] != done * self.h):
            self.states.append(X.numpy().copy())
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
    X0: torch.Tensor, schedule: Schedule, spec: AttentionSpec, t_max: float, h: float, method: str
) -> tuple[torch.Tensor, Field]:
    """Check the inputs of `integrate` (names, h, t_max, delta a multiple of h, tokens, the weights at t = 0 and
    USA overflow); returns the normalised start `[batch, token, dim]` and the field."""
    check_choice(method, METHODS, "integrator")
    if not (math.isfinite(h) and h > 0):
        raise InputError(f"step h must be finite and > 0, got {h}")
    if not (math.isfinite(t_max) and t_max > 0):
        raise InputError(f"t_max must be finite and > 0, got {t_max}")
    check_schedule_step(schedule, h)
    X = check_tokens(X0)
    field_ = Field(schedule, spec, X.shape[2], X.shape[0])
    field_.weights(0.0)
    return X, field_


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
    **measure_kw,
) -> Trajectory:
    """Integrate from `X0` `[batch, token, dim]` to `t_max` with step `h`; record `measures` every step and the
    state every `record_every` steps (0: only start and end). With `stop_on_error` a `NumericalError` ends the
    run early and is reported in `Trajectory.stopped` (partial results kept); otherwise it propagates."""
    X, field_ = prepare(X0, schedule, spec, t_max, h, method)
    preflight(schedule, spec, h)
    steps = int(round(t_max / h))
    rec = _Recorder(measures, steps, h, record_every, measure_kw)
    rec.record(0, X)
    stopped = None
    it: Iterable[int] = range(steps)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc=f"{method} t<={t_max:g}", leave=False)
    done = 0
    for k in it:
        try:
            X = step(method, field_, k * h, X, h, delta)
        except NumericalError as exc:
            if not stop_on_error:
                raise
            stopped = str(exc)
            break
        done = k + 1
        rec.record(done, X)
        if callback is not None:
            callback(done, done * h, X)
    return rec.trajectory(X, done, stopped)
