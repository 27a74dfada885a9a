"""The simplified mutual-reinforcement model of spec §9.1–9.4: loss, analytic gradients, two integrators, slopes.

State: sink logits `alpha` [m] (one per query token v) and the `<s>` value `beta` [K]. Fixed data
(`FlowProblem`): stationary weights `pi` [m], next-token laws `p` [m, K], the mean non-sink value `xi` [K], the
context sizes `ns` [N] with weights `w` [N]. With λ_{v,n} = e^{α_v}/(e^{α_v}+n) and
δ_{v,n} = λβ + (1−λ)ξ, q_{v,n} = softmax(log p_v + δ_{v,n}) and (§9.1)

    ℓ(α, β) = Σ_v π_v Σ_n w_n [log Σ_k p_vk e^{δ_{v,n,k}} − ⟨p_v, δ_{v,n}⟩].

Gradient flow (§9.2): dα_v/dt = −∂ℓ/∂α_v = π_v Σ_n w_n λ(1−λ)⟨p_v − q_{v,n}, β − ξ⟩,
dβ/dt = −∂ℓ/∂β = Σ_v π_v Σ_n w_n λ (p_v − q_{v,n}). All arrays are float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.integrate import solve_ivp

from attnlab.errors import check


@dataclass(frozen=True)
class FlowProblem:
    """Fixed data of the §9.1 loss: `pi` [m], `p` [m, K] (rows in the simplex), `xi` [K], `ns` [N], `w` [N]."""

    pi: np.ndarray
    p: np.ndarray
    xi: np.ndarray
    ns: np.ndarray
    w: np.ndarray

    @property
    def m(self) -> int:
        return int(self.p.shape[0])

    @property
    def K(self) -> int:
        return int(self.p.shape[1])


def make_problem(seed: int = 0, m: int = 3, K: int = 10, ns: tuple[int, ...] = tuple(range(1, 11))) -> FlowProblem:
    """The §9.4 setup: p_v and π are seeded U(0,1) draws renormalised, ξ ~ U(0,1)^K, n uniform over `ns`.

    The §9.3 design decision: n uniform on {1..10} (heterogeneity that makes the flow diverge); pass a single
    n, e.g. `ns=(5,)`, for the negative control that converges to a finite point.
    """
    check(m >= 1 and K >= 2, f"theory problem needs m >= 1 and K >= 2; got m={m}, K={K}")
    check(len(ns) >= 1 and all(n >= 1 for n in ns), f"context sizes must be positive integers; got {ns}")
    rng = np.random.default_rng(seed)
    p = rng.uniform(size=(m, K))
    p /= p.sum(axis=1, keepdims=True)
    pi = rng.uniform(size=m)
    pi /= pi.sum()
    xi = rng.uniform(size=K)
    n_arr = np.asarray(ns, dtype=np.float64)
    w = np.full(len(ns), 1.0 / len(ns))
    return FlowProblem(pi=pi, p=p, xi=xi, ns=n_arr, w=w)


def sink_weights(alpha: np.ndarray, ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """λ_{v,n} = e^{α_v}/(e^{α_v}+n) and 1−λ_{v,n}, both [m, N], computed without cancellation for large α."""
    r = ns[None, :] * np.exp(-alpha[:, None])  # n e^{-α}, [m, N]
    lam = 1.0 / (1.0 + r)
    return lam, r * lam


def _mix(prob: FlowProblem, alpha: np.ndarray, beta: np.ndarray):
    """λ and 1−λ [m, N]; KL(p_v‖q_{v,n}) [m, N]; q [m, N, K]; p − q [m, N, K].

    Computed in centred form to avoid cancellation once ℓ ~ 1e-9: with u = δ − E_{p_v}δ and
    s = Σ_k p_k expm1(u_k), q = p e^u/(1+s), p − q = p ⊙ (s − expm1(u))/(1+s) and KL(p‖q) = log1p(s).
    """
    lam, one_m = sink_weights(alpha, prob.ns)
    beta_c = beta - (prob.p @ beta)[:, None]  # β − E_{p_v}β, [m, K]
    xi_c = prob.xi - (prob.p @ prob.xi)[:, None]  # ξ − E_{p_v}ξ, [m, K]
    u = lam[..., None] * beta_c[:, None, :] + one_m[..., None] * xi_c[:, None, :]  # [m, N, K]
    em = np.expm1(u)
    pw = prob.p[:, None, :]
    s = (pw * em).sum(axis=-1)  # Z − 1, [m, N]
    p_minus_q = pw * (s[..., None] - em) / (1.0 + s[..., None])
    q = pw - p_minus_q
    return lam, one_m, np.log1p(s), q, p_minus_q


def loss_and_gradients(prob: FlowProblem, alpha: np.ndarray, beta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """ℓ(α, β) of §9.1 with its analytic gradients (∂ℓ/∂α [m], ∂ℓ/∂β [K]); the §9.2 flow is minus these.

    ∂ℓ/∂δ_{v,n} = π_v w_n (q_{v,n} − p_v); ∂δ/∂α_v = λ(1−λ)(β − ξ); ∂δ/∂β = λ·I.
    """
    lam, one_m, kl, _, p_minus_q = _mix(prob, alpha, beta)
    coef = prob.pi[:, None] * prob.w  # π_v w_n, [m, N]
    inner = p_minus_q @ (beta - prob.xi)  # ⟨p − q, β − ξ⟩, [m, N]
    g_alpha = -(coef * lam * one_m * inner).sum(axis=1)
    g_beta = -((coef * lam).reshape(-1) @ p_minus_q.reshape(-1, prob.K))
    return float((coef * kl).sum()), g_alpha, g_beta


def loss(prob: FlowProblem, alpha: np.ndarray, beta: np.ndarray) -> float:
    """ℓ(α, β) of §9.1 (a scalar, ≥ 0)."""
    return loss_and_gradients(prob, alpha, beta)[0]


def gradients(prob: FlowProblem, alpha: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Analytic (∂ℓ/∂α [m], ∂ℓ/∂β [K])."""
    _, g_alpha, g_beta = loss_and_gradients(prob, alpha, beta)
    return g_alpha, g_beta


def hessian(prob: FlowProblem, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """Analytic Hessian of ℓ in the packed coordinates [α (m), β (K)], shape [m+K, m+K].

    With d = β − ξ, S = diag(q) − qqᵀ (∂q/∂δ) and c = π_v w_n (sums over n):
    ∂²ℓ/∂β² = Σ c λ² S;  ∂²ℓ/∂α_v∂β = Σ_n c λ(1−λ)[(q − p) + λ S d];
    ∂²ℓ/∂α_v² = Σ_n c [λ(1−λ)(1−2λ)⟨q − p, d⟩ + λ²(1−λ)² dᵀS d]; α_v, α_u (u ≠ v) do not interact.
    """
    m, K = prob.m, prob.K
    lam, one_m, _, q, p_minus_q = _mix(prob, alpha, beta)
    coef = prob.pi[:, None] * prob.w
    d = beta - prob.xi
    diff = -p_minus_q
    qd = q @ d  # [m, N]
    sd = q * d - q * qd[..., None]  # S d, [m, N, K]
    dsd = (q @ (d * d)) - qd**2  # dᵀ S d, [m, N]
    h = np.zeros((m + K, m + K))
    lo = lam * one_m
    h[np.arange(m), np.arange(m)] = (coef * (lo * (1 - 2 * lam) * (diff @ d) + lo**2 * dsd)).sum(axis=1)
    cross = np.einsum("vn,vnk->vk", coef * lo, diff + lam[..., None] * sd)
    h[:m, m:] = cross
    h[m:, :m] = cross.T
    wq = (coef * lam**2)[..., None] * q  # [m, N, K]
    h[m:, m:] = np.diag(wq.sum(axis=(0, 1))) - np.einsum("vnk,vnl->kl", wq, q)
    return h


def flow_rhs(prob: FlowProblem):
    """The §9.2 vector field −∇ℓ on the packed state y = [α (m), β (K)] for `solve_ivp`.

    Same quantity as `-gradients` in the same centred form (see `_mix`), with fewer array operations (it is
    called ~10⁴ times per run): dα_v/dt = Σ_n π_v w_n λ(1−λ)⟨p_v − q, β − ξ⟩, dβ/dt = Σ π_v w_n λ (p_v − q).
    """
    m, K = prob.m, prob.K
    p, xi, ns = prob.p, prob.xi, prob.ns
    pw = p[:, None, :]
    xi_c = (xi - (p @ xi)[:, None])[:, None, :]  # [m, 1, K]
    coef = prob.pi[:, None] * prob.w  # [m, N]

    def rhs(_t: float, y: np.ndarray) -> np.ndarray:
        beta = y[m:]
        r = ns * np.exp(-y[:m])[:, None]  # n e^{-α}, [m, N]
        lam = 1.0 / (1.0 + r)
        u = lam[..., None] * (beta - (p @ beta)[:, None])[:, None, :] + (r * lam)[..., None] * xi_c
        em = np.expm1(u)
        s = (pw * em).sum(axis=-1)
        pq = pw * (s[..., None] - em) / (1.0 + s[..., None])  # p − q, [m, N, K]
        cl = coef * lam
        out = np.empty(m + K)
        out[:m] = (cl * r * lam * (pq @ (beta - xi))).sum(axis=1)
        out[m:] = cl.reshape(-1) @ pq.reshape(-1, K)
        return out

    return rhs


def flow_jacobian(prob: FlowProblem):
    """The Jacobian of `flow_rhs` (minus the `hessian`), [m+K, m+K], for the implicit steps of LSODA."""
    m = prob.m

    def jac(_t: float, y: np.ndarray) -> np.ndarray:
        return -hessian(prob, y[:m], y[m:])

    return jac


@dataclass
class Trajectory:
    """A sampled trajectory: times `t` [T], `alpha` [T, m], `beta` [T, K], `loss` [T]."""

    t: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    loss: np.ndarray

    @property
    def beta_spread(self) -> np.ndarray:
        """‖β − mean β‖ per sample, [T] (the non-constant part of β, §9.3)."""
        return np.linalg.norm(self.beta - self.beta.mean(axis=1, keepdims=True), axis=1)


def gradient_descent(prob: FlowProblem, lr: float = 1.0, steps: int = 10_000) -> Trajectory:
    """Integrator (a) of §9.4: plain gradient descent from α = 0, β = 0; records every step (t = step index)."""
    check(lr > 0 and steps >= 1, f"gradient descent needs lr > 0 and steps >= 1; got lr={lr}, steps={steps}")
    alpha, beta = np.zeros(prob.m), np.zeros(prob.K)
    al, be, ls = np.empty((steps + 1, prob.m)), np.empty((steps + 1, prob.K)), np.empty(steps + 1)
    for k in range(steps + 1):
        ls[k], ga, gb = loss_and_gradients(prob, alpha, beta)
        al[k], be[k] = alpha, beta
        alpha, beta = alpha - lr * ga, beta - lr * gb
    return Trajectory(t=np.arange(steps + 1, dtype=np.float64), alpha=al, beta=be, loss=ls)


def integrate_flow(
    prob: FlowProblem,
    t_max: float = 1e9,
    n_points: int = 400,
    t_min: float = 1e-2,
    rtol: float = 1e-10,
    atol: float = 1e-12,
) -> Trajectory:
    """Integrator (b) of §9.4: `solve_ivp` (LSODA) from α = 0, β = 0 to `t_max`, sampled on a log grid.

    The grid holds t = 0 and `n_points` log-spaced times in [t_min, t_max].
    """
    check(t_max > t_min > 0, f"need t_max > t_min > 0; got t_min={t_min}, t_max={t_max}")
    t_eval = np.concatenate([[0.0], np.logspace(np.log10(t_min), np.log10(t_max), n_points)])
    y0 = np.zeros(prob.m + prob.K)
    sol = solve_ivp(
        flow_rhs(prob), (0.0, t_max), y0, method="LSODA", t_eval=t_eval, rtol=rtol, atol=atol, jac=flow_jacobian(prob)
    )
    check(sol.success, f"solve_ivp failed: {sol.message}")
    alpha, beta = sol.y[: prob.m].T, sol.y[prob.m :].T
    losses = np.array([loss(prob, a, b) for a, b in zip(alpha, beta)])
    return Trajectory(t=sol.t, alpha=alpha, beta=beta, loss=losses)


def loglog_slope(t: np.ndarray, y: np.ndarray, lo: float, hi: float, log_y: bool = True) -> float:
    """Least-squares slope of log y (or y when `log_y` is False) against log t over samples with lo ≤ t ≤ hi."""
    sel = (t >= lo) & (t <= hi)
    check(int(sel.sum()) >= 2, f"need at least 2 samples in [{lo:g}, {hi:g}]; got {int(sel.sum())}")
    yy = np.log(y[sel]) if log_y else y[sel]
    return float(np.polyfit(np.log(t[sel]), yy, 1)[0])


def window_slopes(traj: Trajectory, lo: float, hi: float) -> dict:
    """Slopes over [lo, hi] against log t: α_v (list, [m]), log‖β − mean β‖ and log ℓ."""
    return {
        "alpha": [loglog_slope(traj.t, traj.alpha[:, v], lo, hi, log_y=False) for v in range(traj.alpha.shape[1])],
        "log_beta_spread": loglog_slope(traj.t, traj.beta_spread, lo, hi),
        "log_loss": loglog_slope(traj.t, traj.loss, lo, hi),
    }
