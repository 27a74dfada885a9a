"""Spec §9.5: why the `<s>` residual norm peaks under Adam but not under SGD — two scalar models.

The `<s>` residual is m·u + e with ‖u‖ = ‖e‖ = 1 and cos(u, e) = c. After LayerNorm its alignment with u is
a(m) = (m + c)/√(m² + 2mc + 1); the sink logit is y·a(m) and the loss L = exp(−y·a(m)), so

    ∂L/∂y = −L·a(m),   ∂L/∂m = −L·y(1 − c²)/(m² + 2mc + 1)^{3/2}.

(a) The *reduced recursion* replaces the m-gradient by its late-time form g_t = −log t/(m_t³ t) (y ≈ log t),
    t = 1, 2, … the step number. Under SGD, m⁴ − m₀⁴ ≈ 2·lr·(log t)² (`sgd_closed_form`).
(b) The *two-parameter model* trains (y, m) on L directly.

Optimisers act elementwise on numpy arrays, so one call runs several learning rates side by side:
SGD without momentum (θ ← θ − lr·g) and Adam (β₁ = 0.9, β₂ = 0.999, ε = 1e-8, bias-corrected).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attnlab.errors import check

OPTIMIZERS = ("adam", "sgd")


@dataclass
class ElementwiseOptimizer:
    """SGD (momentum 0) or bias-corrected Adam on an array of independent parameters.

    `lr` is a scalar or an array broadcastable to the parameters (one learning rate per column).
    """

    name: str
    lr: np.ndarray | float
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    def __post_init__(self) -> None:
        check(self.name in OPTIMIZERS, f"unknown optimizer {self.name!r}; choose one of {', '.join(OPTIMIZERS)}")
        check(bool(np.all(np.asarray(self.lr) > 0)), f"learning rates must be > 0; got {self.lr}")
        self._k = 0
        self._m1: np.ndarray | float = 0.0
        self._m2: np.ndarray | float = 0.0

    def step(self, theta: np.ndarray, grad: np.ndarray) -> np.ndarray:
        """One update; returns the new parameters (same shape as `theta`)."""
        if self.name == "sgd":
            return theta - self.lr * grad
        self._k += 1
        self._m1 = self.beta1 * self._m1 + (1 - self.beta1) * grad
        self._m2 = self.beta2 * self._m2 + (1 - self.beta2) * grad * grad
        m_hat = self._m1 / (1 - self.beta1**self._k)
        v_hat = self._m2 / (1 - self.beta2**self._k)
        return theta - self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


def reduced_recursion(optimizer: str, lr: float = 0.3, m0: float = 10.0, steps: int = 10_000) -> np.ndarray:
    """§9.5 (a): m_t under g_t = −log t/(m_t³ t), t = 1..steps; returns m [steps + 1] (m[0] = m₀)."""
    check(m0 > 0 and steps >= 1, f"reduced recursion needs m0 > 0 and steps >= 1; got m0={m0}, steps={steps}")
    opt = ElementwiseOptimizer(optimizer, lr)
    out = np.empty(steps + 1)
    m = np.array(m0, dtype=np.float64)
    out[0] = m0
    for t in range(1, steps + 1):
        m = opt.step(m, np.array(-math.log(t) / (float(m) ** 3 * t)))
        out[t] = m
    return out


def sgd_closed_form(m0: float, lr: float, t: np.ndarray | float) -> np.ndarray:
    """The SGD solution of the reduced recursion in continuous time: (m₀⁴ + 2·lr·(log t)²)^{1/4}."""
    return (m0**4 + 2.0 * lr * np.log(t) ** 2) ** 0.25


def alignment(m: np.ndarray, c: float = 0.0) -> np.ndarray:
    """a(m) = (m + c)/√(m² + 2mc + 1): the alignment of LayerNorm(m·u + e) with u."""
    return (m + c) / np.sqrt(m * m + 2 * m * c + 1)


def two_param_grads(y: np.ndarray, m: np.ndarray, c: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """L = exp(−y·a(m)) and its gradients (∂L/∂y, ∂L/∂m), all elementwise (any common shape)."""
    den = m * m + 2 * m * c + 1
    a = (m + c) / np.sqrt(den)
    loss = np.exp(-y * a)
    return loss, -loss * a, -loss * y * (1 - c * c) / den**1.5


def two_param_model(
    optimizer: str, lrs: np.ndarray, c: float = 0.0, m0: float = 10.0, y0: float = 0.0, steps: int = 10_000
) -> dict[str, np.ndarray]:
    """§9.5 (b): train (y, m) on L = exp(−y·a(m)), one independent run per learning rate in `lrs` [R].

    Returns `y`, `m`, `loss`, each [steps + 1, R] (row 0 is the start).
    """
    check(-1.0 < c < 1.0, f"cos(u, e) = c must lie in (-1, 1); got {c}")
    check(m0 > 0 and steps >= 1, f"two-parameter model needs m0 > 0 and steps >= 1; got m0={m0}, steps={steps}")
    lrs = np.asarray(lrs, dtype=np.float64)
    theta = np.stack([np.full_like(lrs, y0), np.full_like(lrs, m0)])  # [2, R]: rows y, m
    opt = ElementwiseOptimizer(optimizer, lrs[None, :])
    ys, ms, ls = np.empty((steps + 1, lrs.size)), np.empty((steps + 1, lrs.size)), np.empty((steps + 1, lrs.size))
    for k in range(steps + 1):
        loss, gy, gm = two_param_grads(theta[0], theta[1], c)
        ys[k], ms[k], ls[k] = theta[0], theta[1], loss
        if k < steps:
            theta = opt.step(theta, np.stack([gy, gm]))
    return {"y": ys, "m": ms, "loss": ls}
