"""Time-varying head-wise weights W(t) = (P(t), V(t)) (spec section 3, "Schedules").

| name       | W(t)                                   |
| constant   | W_0                                    |
| periodic   | W_0 + sin(omega t) W_1                 |
| cycle      | W_{floor(t/Delta) mod L}               |
| random     | draw(seed, floor(t/Delta)), iid N(0, sigma^2/d) or GOE |

Two deterministic choices for the authors' counterexample (consensus spec R12): P = 0 (`key_query="zero"`, so
attention is uniform) and V = J, a rotation by pi/2 in each coordinate plane (x_1, x_2), (x_3, x_4), ...
(`value="rotation"`; J is skew-symmetric, J^T = -J; an odd last coordinate is left at 0).

`None` stands for the identity (P = I or V = I) and is never materialised. A random draw is a pure function
of (seed, interval), so reruns and RK4 stages agree. Piecewise-constant schedules evaluate all RK4 stages at
the interval of the step midpoint (spec Decision); the integrator asks `weights(t_mid)` for them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import torch

from attnlab.consensus.names import ENSEMBLES, SCHEDULES
from attnlab.errors import InputError, check_choice

VALUE_KINDS = ("identity", "random", "rotation")

Pair = tuple["torch.Tensor | None", "torch.Tensor | None"]


class Schedule:
    """Base class: `weights(t) -> (P, V)` each `None` or `[head, d, d]` / `[batch, head, d, d]`."""

    name = "schedule"
    piecewise = False
    delta: float | None = None

    def weights(self, t: float) -> Pair:
        raise InputError(f"schedule {self.name} defines no weights")

    def interval(self, t: float) -> int:
        """Index of the piecewise-constant interval containing t (0 for smooth schedules)."""
        if not self.piecewise or self.delta is None:
            return 0
        return int(math.floor(t / self.delta + 1e-9))

    def samples(self, t_max: float) -> list[tuple[float, Pair]]:
        """(time, weights) at each interval start in [0, t_max) (smooth schedules: every 0.1 in time)."""
        step = self.delta if self.piecewise and self.delta is not None else 0.1
        count = max(1, int(math.ceil(t_max / step - 1e-9)))
        return [(k * step, self.weights(k * step)) for k in range(count)]


def _stack(P: torch.Tensor | None, V: torch.Tensor | None) -> torch.Tensor | None:
    parts = [w.reshape(-1) for w in (P, V) if w is not None]
    return torch.cat(parts) if parts else None


def roughness(schedule: Schedule, t_max: float) -> float:
    """r = mean_k ||W_{k+1} - W_k||_F / ||W_k||_F over consecutive samples (0 for constant, ~sqrt(2) for random)."""
    ws = [_stack(*w) for _, w in schedule.samples(t_max)]
    if len(ws) < 2 or ws[0] is None:
        return 0.0
    mats = cast(list[torch.Tensor], ws)  # every sample has the same matrices: none is None here
    r = [float((b - a).norm() / a.norm().clamp_min(1e-300)) for a, b in zip(mats[:-1], mats[1:])]
    return float(np.mean(r))


@dataclass
class Constant(Schedule):
    """W(t) = (P, V)."""

    P: torch.Tensor | None = None
    V: torch.Tensor | None = None
    name = "constant"

    def weights(self, t: float) -> Pair:
        return self.P, self.V


@dataclass
class Periodic(Schedule):
    """W(t) = W_0 + sin(omega t) W_1, for P and V separately (a `None` W_1 keeps that matrix constant)."""

    P0: torch.Tensor | None
    P1: torch.Tensor | None
    V0: torch.Tensor | None = None
    V1: torch.Tensor | None = None
    omega: float = 1.0
    name = "periodic"

    def weights(self, t: float) -> Pair:
        s = math.sin(self.omega * t)
        P = self.P0 if self.P1 is None else _plus(self.P0, s * self.P1)
        V = self.V0 if self.V1 is None else _plus(self.V0, s * self.V1)
        return P, V


def _plus(W0: torch.Tensor | None, W1: torch.Tensor) -> torch.Tensor:
    if W0 is None:
        eye = torch.eye(W1.shape[-1], dtype=W1.dtype)
        return eye + W1
    return W0 + W1


@dataclass
class Cycle(Schedule):
    """W(t) = layers[floor(t/delta) mod L]."""

    layers: list[Pair]
    delta: float = 1.0
    name = "cycle"
    piecewise = True

    def __post_init__(self) -> None:
        if not self.layers:
            raise InputError("cycle schedule needs at least one layer")
        _check_delta(self.delta)

    def weights(self, t: float) -> Pair:
        return self.layers[self.interval(t) % len(self.layers)]


@dataclass
class RandomSchedule(Schedule):
    """W(t) = draw(seed, floor(t/delta)): P iid N(0, sigma^2/d) entries, GOE or I; V = I or drawn like P.

    `batch` > 0 draws independent weights per start (`[batch, head, d, d]`).
    """

    d: int
    heads: int = 1
    seed: int = 0
    delta: float = 1.0
    sigma: float = 1.0
    ensemble: str = "gaussian"
    random_V: bool = False
    batch: int = 0
    rotate_V: bool = False
    name = "random"
    piecewise = True
    _cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        check_choice(self.ensemble, ENSEMBLES, "random ensemble")
        _check_delta(self.delta)
        if not math.isfinite(self.sigma) or self.sigma < 0:
            raise InputError(f"sigma must be finite and >= 0, got {self.sigma}")

    def draw(self, k: int) -> Pair:
        """The weights of interval k: a pure function of (seed, k)."""
        if k not in self._cache:
            g = torch.Generator().manual_seed(int(self.seed) * 1_000_003 + int(k))
            shape = ((self.batch,) if self.batch else ()) + (self.heads, self.d, self.d)
            scale = self.sigma / math.sqrt(self.d)
            P: torch.Tensor | None = torch.randn(shape, generator=g, dtype=torch.float64) * scale
            if self.ensemble == "goe":
                P = (P + P.transpose(-1, -2)) / math.sqrt(2.0)  # type: ignore[operator,union-attr]
            elif self.ensemble == "identity":
                P = None
            elif self.ensemble == "zero":
                P = torch.zeros(shape, dtype=torch.float64)
            V = torch.randn(shape, generator=g, dtype=torch.float64) * scale if self.random_V else None
            if self.rotate_V:
                V = rotation_generator(self.d).expand(shape).clone()
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[k] = (P, V)
        return self._cache[k]

    def weights(self, t: float) -> Pair:
        return self.draw(self.interval(t))


def rotation_generator(d: int) -> torch.Tensor:
    """J [d, d]: J[2k, 2k+1] = -1, J[2k+1, 2k] = 1 (rotation by pi/2 in each plane; skew-symmetric)."""
    J = torch.zeros(d, d, dtype=torch.float64)
    for k in range(d // 2):
        J[2 * k, 2 * k + 1], J[2 * k + 1, 2 * k] = -1.0, 1.0
    return J


def _check_delta(delta: float) -> None:
    if not (math.isfinite(delta) and delta > 0):
        raise InputError(f"schedule interval delta must be finite and > 0, got {delta}")


def check_schedule_step(schedule: Schedule, h: float) -> None:
    """For piecewise-constant schedules, delta must be a multiple of h (spec Decision)."""
    if schedule.piecewise and schedule.delta is not None:
        ratio = schedule.delta / h
        if abs(ratio - round(ratio)) > 1e-9 or round(ratio) < 1:
            raise InputError(f"schedule interval delta={schedule.delta:g} must be a multiple of the step h={h:g}")


def make_schedule(
    name: str,
    d: int,
    heads: int = 1,
    seed: int = 0,
    *,
    scale: float = 1.0,
    value: str = "identity",
    omega: float = 1.0,
    delta: float = 1.0,
    layers: int = 4,
    key_query: str = "gaussian",
) -> Schedule:
    """Build a named schedule with P drawn from `key_query` (gaussian: std scale/sqrt(d); goe; identity) and V
    'identity', 'random' (Gaussian, std scale/sqrt(d)) or 'rotation' (J of `rotation_generator`); `key_query`
    'zero' gives P = 0 (uniform attention).

    constant: one draw; periodic: W_0 + sin(omega t) W_1 with two draws; cycle: `layers` draws each held for
    `delta`; random: redrawn every `delta`.
    """
    check_choice(name, SCHEDULES, "schedule")
    check_choice(value, VALUE_KINDS, "value matrix")
    rv = value == "random"
    base = RandomSchedule(
        d=d,
        heads=heads,
        seed=seed,
        sigma=scale,
        random_V=rv,
        delta=max(delta, 1e-9),
        ensemble=key_query,
        rotate_V=value == "rotation",
    )
    if name == "constant":
        return Constant(*base.draw(0))
    if name == "periodic":
        (P0, V0), (P1, V1) = base.draw(0), base.draw(1)
        return Periodic(P0, P1, V0, V1, omega=omega)
    if name == "cycle":
        return Cycle([base.draw(k) for k in range(layers)], delta=delta)
    return base


def schedule_arrays(schedule: Schedule, t_max: float) -> dict[str, np.ndarray]:
    """Arrays for `weights.npz`: `t` [K] and `P`, `V` [K, (batch,) head, d, d] at each interval start."""
    samples = schedule.samples(t_max)
    out: dict[str, np.ndarray] = {"t": np.array([t for t, _ in samples])}
    for j, key in enumerate(("P", "V")):
        mats = [w[j] for _, w in samples]
        if mats[0] is not None:
            out[key] = torch.stack(cast(list[torch.Tensor], mats)).numpy()
    out["identity"] = np.array([k for k in ("P", "V") if k not in out], dtype="U1")
    return out
