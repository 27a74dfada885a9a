"""The entropy-form adjudication (spec §10): at one (configuration, alpha, N) point, solve the chain form, the simple
form and the GP limit on the same data, run collapsed HMC, and compare U, U_a, the predictor and test accuracy.

Statistics per form f: e_f = ||U_hat - U_f||_F / ||U_f||_F; z_f = (U_hat - U_f)/MCSE per entry;
r_f = RMS(fbar_sampled - fbar_f)/RMS(fbar_f); the separation s = ||U_chain - U_simple||_F / ||U_chain||_F.
`extrapolate` fits U_hat(N) - U_f(N) = a_f + b_f/N, weighted by 1/MCSE^2.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from attnlab.paths.sampling.posterior import sample_point
from attnlab.paths.tasks.data import build_data
from attnlab.paths.theory.points import theory_point
from attnlab.paths.theory.predictor import predict

CONFIGS = MappingProxyType({"C1": "good1", "C2": "good2", "C3": "4path"})


def compare_point(
    config: str,
    alpha: float,
    N: int,
    T: float = 0.1,
    chains: int = 4,
    warmup: int = 1000,
    draws: int = 2000,
    n_leapfrog: int = 16,
    n_test: int = 1000,
    seed: int = 0,
    progress: bool = False,
) -> dict:
    """One adjudication point; returns a JSON-ready record."""
    P = int(round(alpha * N))
    P += P % 2
    data = build_data("markov", P, n_test, variant=CONFIGS[config])
    theory = {}
    for form in ("chain", "simple"):
        sp, rec = theory_point(data, N, T, form)
        theory[form] = (sp, rec, predict(sp.U, data.gram, data.y_train, T, data.xit_test).mean)
    _, gp_rec = theory_point(data, float("inf"), T)
    s = sample_point(data, N, T, chains, warmup, draws, "hmc", n_leapfrog, 1, 5, seed, progress)
    Uh, mc = s["U_hat"], np.maximum(s["U_mcse"], 1e-300)
    keys = ("U_a_hat", "U_a_mcse", "rhat_max", "ess_bulk_min", "accept_mean", "divergences")
    out = {"config": config, "alpha": alpha, "N": N, "P": P, "T": T, "U_hat": Uh, "U_mcse": s["U_mcse"],
           **{k: s[k] for k in keys}, "sampler_converged": s["converged"], "sampled_accuracy": s["sampled_accuracy"],
           "wall_s": s["wall_s"], "accuracy_gp": gp_rec["accuracy"],
           "s": float(np.linalg.norm(theory["chain"][0].U - theory["simple"][0].U)
                      / np.linalg.norm(theory["chain"][0].U))}  # fmt: skip
    for form, (sp, rec, fbar) in theory.items():
        out[f"U_{form}"] = sp.U
        out[f"U_a_{form}"] = sp.U_a
        out[f"e_{form}"] = float(np.linalg.norm(Uh - sp.U) / np.linalg.norm(sp.U))
        out[f"z_{form}"] = (Uh - sp.U) / mc
        out[f"r_{form}"] = float(np.sqrt(np.mean((s["pred_mean"] - fbar) ** 2)) / np.sqrt(np.mean(fbar**2)))
        out[f"accuracy_{form}"] = rec["accuracy"]
        out[f"converged_{form}"] = rec["converged"]
    return out


def extrapolate(points: list[dict], form: str) -> dict:
    """Per diagonal entry: weighted least squares of U_hat(N) - U_f(N) = a + b/N; returns a, SE(a) per entry."""
    Ns = np.array([p["N"] for p in points], dtype=float)
    n = np.asarray(points[0]["U_hat"]).shape[0]
    a, se = np.zeros(n), np.zeros(n)
    for i in range(n):
        d = np.array([np.asarray(p["U_hat"])[i, i] - np.asarray(p[f"U_{form}"])[i, i] for p in points])
        w = 1.0 / np.maximum(np.array([np.asarray(p["U_mcse"])[i, i] for p in points]), 1e-12) ** 2
        X = np.stack([np.ones_like(Ns), 1.0 / Ns], 1)
        A = X.T @ (w[:, None] * X)
        coef = np.linalg.solve(A, X.T @ (w * d))
        resid = d - X @ coef
        dof = max(len(Ns) - 2, 1)
        scale = max(float(np.sum(w * resid**2)) / dof, 1.0)  # inflate SE when the fit is worse than MCSE
        cov = np.linalg.inv(A) * scale
        a[i], se[i] = coef[0], np.sqrt(cov[0, 0])
    return {"a": a, "se": se, "z": a / se}
