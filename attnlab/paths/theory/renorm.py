"""Scalar against matrix renormalisation (attention-paths spec §16, S9).

The matrix theory renormalises the GP kernel by a full order parameter U (every pair of paths). A *scalar*
renormalisation, as in the back-propagating kernel renormalisation of deep linear networks, restricts every
order parameter to a multiple of its GP value, U_l = u_l U_l^GP, and minimises the same action over the L
numbers u_l (only u_1 enters the kernel). Then K = u_1 K_GP and k = u_1 k_GP, so the mean predictor [P1] is

    f_bar = u_1 k_GP^T (u_1 K_GP + T I)^{-1} Y = k_GP^T (K_GP + (T/u_1) I)^{-1} Y,

the GP's at temperature T/u_1: equal to the GP's own prediction as T -> 0, and at any T once the ridge is
matched. The matrix renormalisation changes the kernel's shape, not just its scale, and so the predictor.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attnlab.errors import NumericalError
from attnlab.paths.tasks.data import PathData
from attnlab.paths.theory.action import Problem, evaluate
from attnlab.paths.theory.predictor import gp_U, metrics, predict


def scalar_saddle(prob: Problem, tol: float = 1e-10) -> tuple[list[float], float, float]:
    """Minimise S over U_l = u_l U_l^GP (scalar u_l > 0, one per free order parameter). Returns
    ([u_1..u_L], S, max |dS/d ln u_l|); the gradient is dS/d ln u_l = <dS/dU_l, U_l>_F."""
    from scipy.optimize import minimize

    gp = prob.gp_point()

    def fun(z: np.ndarray) -> tuple[float, np.ndarray]:
        Us = [math.exp(zl) * G for zl, G in zip(z, gp)]
        try:
            ev = evaluate(prob, Us)
        except NumericalError:
            return math.inf, np.zeros_like(z)
        return float(ev.S), np.array([float((g * U).sum()) for g, U in zip(ev.grads, Us)])

    res = minimize(fun, np.zeros(len(gp)), jac=True, method="L-BFGS-B", options={"gtol": tol, "ftol": 1e-15})
    z = res.x
    S, g = fun(z)
    # L-BFGS-B can end on a failed line search above gtol (8.9e-10 against 1e-10 under the AVX2 and generic kernels,
    # 2e-15 under the default ones; issue 37): Newton steps on the L scalars, the Hessian by central differences of
    # the analytic gradient, finish it while they lower max|g|
    for _ in range(10):
        if np.abs(g).max() < tol:
            break
        h = 1e-5
        hess = np.stack([(fun(z + h * e)[1] - fun(z - h * e)[1]) / (2 * h) for e in np.eye(len(z))])
        try:
            z_new = z - np.linalg.solve(0.5 * (hess + hess.T), g)
        except np.linalg.LinAlgError:
            break
        S_new, g_new = fun(z_new)
        if not np.abs(g_new).max() < np.abs(g).max():
            break
        z, S, g = z_new, S_new, g_new
    return [math.exp(v) for v in z], S, float(np.abs(g).max())


def _rms(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((a - b) ** 2)))


def renorm_record(data: PathData, prob: Problem, U_matrix: np.ndarray) -> dict:
    """S9 at one (N, T): the scalar saddle point, test accuracies of scalar, matrix and GP kernels, and the RMS gaps
    of the mean predictors: scalar vs GP at the same T (small only as T -> 0), scalar vs GP at T/u_1 (zero up to
    rounding), matrix vs GP."""
    u, S, g = scalar_saddle(prob)
    T, S2 = prob.T, prob.Sigma2
    n = data.cfg.n_paths
    U_gp = gp_U(n, S2)
    pred = {
        "scalar": predict(u[0] * U_gp, data.gram, data.y_train, T, data.xit_test),
        "matrix": predict(U_matrix, data.gram, data.y_train, T, data.xit_test),
        "gp": predict(U_gp, data.gram, data.y_train, T, data.xit_test),
        "gp_matched": predict(U_gp, data.gram, data.y_train, T / u[0], data.xit_test),
    }
    acc = {k: metrics(p, data.y_test)["accuracy"] for k, p in pred.items()}
    scale = float(np.sqrt(np.mean(pred["gp"].mean ** 2)))
    return {
        "u_scalar": u,
        "scalar_action": S,
        "scalar_max_grad": g,
        "accuracy_scalar": acc["scalar"],
        "accuracy_matrix": acc["matrix"],
        "accuracy_gp": acc["gp"],
        "rms_pred_scalar_vs_gp": _rms(pred["scalar"].mean, pred["gp"].mean),
        "rms_pred_scalar_vs_gp_matched_T": _rms(pred["scalar"].mean, pred["gp_matched"].mean),
        "rms_pred_matrix_vs_gp": _rms(pred["matrix"].mean, pred["gp"].mean),
        "rms_pred_gp": scale,
        "effective_temperature": T / u[0],
    }


def scalar_U(prob: Problem, u1: float) -> torch.Tensor:
    """The scalar-renormalised U_1 = u_1 Sigma^2 I [n_paths, n_paths]."""
    return u1 * prob.gp_point()[0]
