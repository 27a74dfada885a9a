"""Closed forms and reduced models of the theory (spec section 4).

- equiangular rho-ODE of GLPR (d -> infinity, or exactly for an equiangular start with d >= n):
    SA : rho' = 2 e^{beta rho} (1-rho) ((n-1) rho + 1) / (e^beta + (n-1) e^{beta rho})
    USA: rho' = (2/n) e^{beta rho} (1-rho) ((n-1) rho + 1)
- t_eq(beta): the time at which rho reaches 0.999 from rho(0) = 0;
- predicted tail slopes of log E near consensus (spec 4.6);
- the consensus point for a symmetric V (its dominant eigenvector) and the linearised lag omega/(l1 - l2).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.integrate import solve_ivp

from attnlab.errors import InputError, check_choice


def rho_rhs(rho: float | np.ndarray, beta: float, n: int, kind: str = "SA") -> float | np.ndarray:
    """Right-hand side of the equiangular rho-ODE (GLPR) for SA or USA."""
    check_choice(kind, ("SA", "USA"), "attention kind")
    rho = np.asarray(rho, dtype=np.float64)
    core = (1 - rho) * ((n - 1) * rho + 1)
    if kind == "USA":
        return 2.0 / n * np.exp(beta * rho) * core
    # divide numerator and denominator by e^{beta rho} for stability at large beta
    return 2.0 * core / (np.exp(beta * (1 - rho)) + (n - 1))


def rho_solution(t: np.ndarray, beta: float, n: int, kind: str = "SA", rho0: float = 0.0) -> np.ndarray:
    """rho(t) on the times `t` (increasing, t[0] >= 0) by DOP853 with rtol = atol = 1e-12."""
    t = np.asarray(t, dtype=np.float64)
    sol = solve_ivp(
        lambda _, r: rho_rhs(r, beta, n, kind),
        (0.0, float(t[-1])),
        [rho0],
        method="DOP853",
        t_eval=t,
        rtol=1e-12,
        atol=1e-12,
    )
    return np.minimum(sol.y[0], 1.0)


def t_equiangular(beta: float, n: int, kind: str = "SA", level: float = 0.999, rho0: float = 0.0) -> float:
    """First time rho_beta reaches `level`, by quadrature of dt = d rho / rho'(rho)."""
    if not 0 <= rho0 < level < 1:
        raise InputError(f"need 0 <= rho0 < level < 1, got rho0={rho0}, level={level}")
    from scipy.integrate import quad

    val, _ = quad(lambda r: 1.0 / float(rho_rhs(r, beta, n, kind)), rho0, level, limit=200)
    return float(val)


def tail_slope(case: str, beta: float = 1.0, n: int = 2, lambda1: float = 1.0) -> float:
    """Predicted slope of log E near consensus (spec 4.6): 'full_SA' -2*lambda1(V), 'full_USA' -2 e^beta,
    'causal_SA' -1, 'causal_USA' -2 e^beta / n (the last two for V = I, P = I)."""
    table = {
        "full_SA": -2.0 * lambda1,
        "full_USA": -2.0 * math.exp(beta),
        "causal_SA": -1.0,
        "causal_USA": -2.0 * math.exp(beta) / n,
    }
    check_choice(case, tuple(table), "tail-rate case")
    return table[case]


def consensus_point(V: np.ndarray) -> tuple[np.ndarray, float, float]:
    """For symmetric V `[d, d]`: the dominant unit eigenvector v_1 and the two top eigenvalues (l1, l2)."""
    V = np.asarray(V, dtype=np.float64)
    if not np.allclose(V, V.T):
        raise InputError("consensus_point needs a symmetric V")
    w, U = np.linalg.eigh(V)
    return U[:, -1], float(w[-1]), float(w[-2])


def predicted_lag(omega: float, l1: float, l2: float) -> float:
    """Linearised angular lag omega / (l1 - l2) of consensus behind an eigenvector rotating at rate omega."""
    if l1 <= l2:
        raise InputError(f"need a spectral gap l1 > l2, got l1={l1}, l2={l2}")
    return omega / (l1 - l2)


def fit_log_slope(t: np.ndarray, E: np.ndarray, lo: float = 1e-11, hi: float = 1e-3) -> float:
    """Least-squares slope of log E against t over the points with lo <= E <= hi (nan if fewer than 3)."""
    t, E = np.asarray(t), np.asarray(E)
    sel = (E >= lo) & (E <= hi)
    if sel.sum() < 3:
        return float("nan")
    return float(np.polyfit(t[sel], np.log(E[sel]), 1)[0])
