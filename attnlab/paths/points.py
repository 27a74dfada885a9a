"""One theory point, a warm-started sweep of them, and one sampled point: the computations behind the commands.

A theory point solves the saddle point at (N, T) (spec §5.6) and evaluates the predictor [P1]/[P2] on the test
set, with the GP baselines U = Sigma^2 I (spec §6); a sampled point runs HMC/MALA at width N (spec §7) and
summarises U_hat (Eq 14) with its MCSE, the diagnostics and the sampled predictor.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from types import MappingProxyType
from typing import Any

import numpy as np
import torch

from attnlab.paths.data import PathData
from attnlab.paths.diagnostics import ebfmi, summarize
from attnlab.paths.predictor import Prediction, alignment, gp_U, metrics, predict
from attnlab.paths.sampling import CollapsedTarget, FullTarget, PredictorSums, SamplerResult, sample
from attnlab.paths.solver import SaddlePoint, solve
from attnlab.paths.theory import Problem

# sampler gates (spec §7.3): a sampled point is `converged` when all hold
GATES = MappingProxyType({"rhat_max": 1.01, "ess_bulk_min": 400, "ebfmi_min": 0.3, "divergence_rate": 0.005})


def make_problem(data: PathData, N: float, T: float, form: str = "chain") -> Problem:
    """The saddle-point problem at width N (every layer) and temperature T."""
    L = data.cfg.L
    return Problem(
        data.gram, torch.tensor(data.y_train), T, data.cfg.H, tuple([float(N)] * (L + 1)), data.cfg.variances, form
    )


def gp_baselines(data: PathData, T: float) -> dict[str, float]:
    """Test accuracy of GP regression with U = Sigma^2 I on all paths and on the task's restricted path sets."""
    S2 = float(np.prod(data.cfg.variances[1:]))
    out = {}
    for name, paths in {"all": None, **data.baselines}.items():
        pred = predict(gp_U(data.cfg.n_paths, S2, paths), data.gram, data.y_train, T, data.xit_test)
        out[name] = metrics(pred, data.y_test)["accuracy"]
    return out


def theory_point(
    data: PathData,
    N: float,
    T: float,
    form: str = "chain",
    method: str = "newton",
    tol: float = 1e-8,
    init: list | None = None,
    max_iter: int = 500,
    hessian: bool = True,
) -> tuple[SaddlePoint, dict]:
    """Solve one (N, T) point and evaluate it on the test set; returns (saddle point, metrics record)."""
    prob = make_problem(data, N, T, form)
    sp = solve(prob, method, tol=tol, init=init, max_iter=max_iter, hessian=hessian)
    m = metrics(predict(sp.U, data.gram, data.y_train, T, data.xit_test), data.y_test)
    gp = gp_baselines(data, T)
    n_paths = data.cfg.n_paths
    rec = {
        "N": N, "T": T, "P": data.P, "alpha": data.P / N, "alpha0": data.P / (data.gram.N0 * n_paths),
        "entropy_form": form, "converged": sp.converged, "iterations": sp.iterations, "max_grad": sp.max_grad,
        "hessian_min_eig": sp.hessian_min_eig, "action": sp.S, "energy": sp.E, "entropy": sp.entropy,
        "U": sp.U, "U_a": sp.U_a, "accuracy": m["accuracy"], "gauss_acc": m["gauss_acc"], "mse": m["mse"],
        "accuracy_gp": gp["all"], **{f"accuracy_gp_{k}": v for k, v in gp.items() if k != "all"},
        "cond_K": sp.cond_K, "jitter_added": 0.0, "wall_s": sp.wall_s, "method": sp.method,
    }  # fmt: skip
    return sp, rec


def sweep_points(
    data: PathData,
    Ns: list[float],
    T: float,
    form: str = "chain",
    method: str = "newton",
    tol: float = 1e-8,
    init: list | None = None,
    progress: bool = True,
) -> Iterator[tuple[SaddlePoint, dict]]:
    """Yield points for `Ns` in the order given (large to small N for a sweep), each warm-started from the
    previous converged finite-N point (`init`: the chain [U_1..U_L] to start the first one from)."""
    from tqdm import tqdm

    for N in tqdm(Ns, desc="paths sweep", disable=not progress, file=None):
        sp, rec = theory_point(data, N, T, form, method, tol, init)
        yield sp, rec
        init = warm_start(sp, N)


def warm_start(sp: SaddlePoint, N: float) -> list[torch.Tensor] | None:
    """The next sweep point's start: this point's chain when it converged at a finite N, else the GP point."""
    return [torch.tensor(u) for u in sp.chain] if sp.converged and not math.isinf(N) else None


def sweep(
    data: PathData,
    Ns: list[float],
    T: float,
    form: str = "chain",
    method: str = "newton",
    tol: float = 1e-8,
    progress: bool = True,
) -> list[tuple[SaddlePoint, dict]]:
    """Points from large to small N, each warm-started from the previous one; all share the Gram."""
    return list(sweep_points(data, sorted(Ns, reverse=True), T, form, method, tol, None, progress))


def alignment_record(data: PathData, U: np.ndarray, top: int = 30) -> dict:
    """Kernel-task alignment of the renormalised and GP kernels."""
    S2 = float(np.prod(data.cfg.variances[1:]))
    return {
        "renormalised": alignment(U, data.gram, data.y_train, top),
        "gp": alignment(gp_U(data.cfg.n_paths, S2), data.gram, data.y_train, top),
    }


def ablations(data: PathData, U: np.ndarray, T: float) -> dict[str, float]:
    """Test accuracy of the theory's U and of two ablations (spec §9.1, 2-path variant): `diagonal_only`
    (off-diagonal entries zeroed) and `equalised_diagonal` (every diagonal entry set to U[0, 0])."""
    U = np.asarray(U, dtype=np.float64)
    variants = {
        "full": U,
        "diagonal_only": np.diag(np.diag(U)),
        "equalised_diagonal": U - np.diag(np.diag(U)) + U[0, 0] * np.eye(len(U)),
    }
    out = {}
    for name, V in variants.items():
        if np.linalg.eigvalsh(V)[0] < 0:  # an ablated U need not be PSD; report it instead of failing
            out[name] = float("nan")
            continue
        out[name] = metrics(predict(V, data.gram, data.y_train, T, data.xit_test), data.y_test)["accuracy"]
    return out


def sample_point(
    data: PathData,
    N: int,
    T: float,
    chains: int,
    warmup: int,
    draws: int,
    kind: str = "hmc",
    n_leapfrog: int = 16,
    thin: int = 1,
    predict_every: int = 5,
    seed: int = 0,
    progress: bool = True,
    target_kind: str = "collapsed",
) -> dict:
    """Sampling at width N: U_hat (Eq 14) with MCSE, diagnostics, gates and the sampled predictor. The predictor
    is the Rao-Blackwellised mean over the upper-weight draws (valid for both targets: their upper-weight
    marginals are the same posterior). Diagnostics that too few draws leave undefined are NaN."""
    cfg = data.cfg.with_widths(N)
    cls = FullTarget if target_kind == "full" else CollapsedTarget
    target = cls(cfg, data.gram, data.y_train, T)
    sums = PredictorSums(target, data.xit_test, every=predict_every)
    t0 = time.perf_counter()
    res = sample(target, chains, warmup, draws, n_leapfrog, kind, seed=seed, thin=thin, on_draw=sums, progress=progress)
    wall = time.perf_counter() - t0
    mean, var, fixed = sums.result()
    rec: dict[str, Any] = {"N": N, "T": T, "alpha": data.P / N, "sampler": kind, "target": target_kind,
                           "chains": chains, "warmup": warmup, "draws": draws}  # fmt: skip
    rec.update(_sample_summary(res, fixed, wall))
    rec.update({"pred_mean": mean, "pred_var": var})
    rec.update({f"sampled_{k}": v for k, v in metrics(Prediction(mean, var), data.y_test).items()})
    n_iter = res.U.shape[1] * thin
    rec["converged"] = bool(
        rec["rhat_max"] <= GATES["rhat_max"]
        and rec["ess_bulk_min"] >= GATES["ess_bulk_min"]
        and rec["ebfmi_min"] >= GATES["ebfmi_min"]
        and rec["divergences"] <= GATES["divergence_rate"] * chains * n_iter
    )
    return rec


def _nan_extreme(values: np.ndarray, fn: str) -> float:
    """nanmax / nanmin of `values`, NaN (not available) when every entry is NaN."""
    finite = values[~np.isnan(values)]
    if finite.size == 0:
        return float("nan")
    return float(finite.max() if fn == "max" else finite.min())


def _sample_summary(res: SamplerResult, fixed: np.ndarray, wall: float) -> dict:
    """U_hat, U_mcse [n, n], U_a with MCSE, worst R-hat and bulk ESS over U, U_a, log p and the fixed predictor
    draws, acceptance, divergences, E-BFMI and the final step sizes."""
    n = res.U.shape[-1]
    iu = np.triu_indices(n)
    s_U = summarize(res.U[:, :, iu[0], iu[1]])
    s_a = summarize(res.U_a[..., None])
    s_lp = summarize(res.log_prob[..., None])
    s_f = summarize(fixed)
    U_hat, U_mcse = np.zeros((n, n)), np.zeros((n, n))
    U_hat[iu], U_mcse[iu] = s_U["mean"], s_U["mcse"]
    U_hat, U_mcse = U_hat + np.triu(U_hat, 1).T, U_mcse + np.triu(U_mcse, 1).T
    rh = np.concatenate([s_U["rhat"], s_a["rhat"], s_lp["rhat"], s_f["rhat"]])
    es = np.concatenate([s_U["ess_bulk"], s_a["ess_bulk"], s_lp["ess_bulk"], s_f["ess_bulk"]])
    ess_min = _nan_extreme(es, "min")
    return {
        "U_hat": U_hat, "U_mcse": U_mcse, "U_a_hat": float(s_a["mean"][0]), "U_a_mcse": float(s_a["mcse"][0]),
        "rhat_max": _nan_extreme(rh, "max"), "ess_bulk_min": ess_min,
        "accept_mean": float(res.accept.mean()), "divergences": int(res.divergences.sum()),
        "numerical_rejections": int(res.numerical_rejections.sum()),
        "ebfmi_min": float(ebfmi(res.energy).min()), "step_size": res.step_size,
        "ess_per_s": ess_min / wall, "wall_s": wall,
    }  # fmt: skip
