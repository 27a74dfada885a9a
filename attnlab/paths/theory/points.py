"""One theory point and a warm-started sweep of them: the theory's computations behind the commands.

A theory point solves the saddle point at (N, T) (spec §5.6) and evaluates the predictor [P1]/[P2] on the test
set, with the GP baselines U = Sigma^2 I (spec §6); a sampled point is `attnlab.paths.sampling.posterior`.

Device: the solve computes where the Gram it is given is (`gram`: the data's own, on the cpu, or its copy on a
GPU, `data.gram.to(device)`, made once per run by the caller); the predictor, the GP baselines and the alignment
read the data's cpu Gram with the solved U (one P x P Cholesky and the test kernels, once a point).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch

from attnlab.paths.networks.kernels import PathGram
from attnlab.paths.tasks.data import PathData
from attnlab.paths.theory.action import Problem
from attnlab.paths.theory.predictor import alignment, gp_U, metrics, predict
from attnlab.paths.theory.solver import SaddlePoint, solve_saddle_point


def make_problem(data: PathData, N: float, T: float, form: str = "chain", gram: PathGram | None = None) -> Problem:
    """The saddle-point problem at width N (every layer) and temperature T, on `gram` (default the data's own;
    else its copy on the device the problem is to compute on)."""
    L = data.cfg.L
    gram = data.gram if gram is None else gram
    return Problem(
        gram, torch.tensor(data.y_train), T, data.cfg.H, tuple([float(N)] * (L + 1)), data.cfg.variances, form
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
    gram: PathGram | None = None,
) -> tuple[SaddlePoint, dict]:
    """Solve one (N, T) point (where `gram` is: see the module docstring) and evaluate it on the test set on the
    cpu; returns (saddle point, metrics record)."""
    prob = make_problem(data, N, T, form, gram)
    sp = solve_saddle_point(prob, method, tol=tol, init=init, max_iter=max_iter, hessian=hessian)
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
    gram: PathGram | None = None,
) -> Iterator[tuple[SaddlePoint, dict]]:
    """Yield points for `Ns` in the order given (large to small N for a sweep), each warm-started from the
    previous converged finite-N point (`init`: the chain [U_1..U_L] to start the first one from); every solve on
    `gram` (see `theory_point`)."""
    from tqdm import tqdm

    for N in tqdm(Ns, desc="paths sweep", disable=not progress, file=None):
        sp, rec = theory_point(data, N, T, form, method, tol, init, gram=gram)
        yield sp, rec
        init = warm_start(sp, N)


def warm_start(sp: SaddlePoint, N: float) -> list[torch.Tensor] | None:
    """The next sweep point's start: this point's chain when it converged at a finite N, else the GP point."""
    return [torch.tensor(u) for u in sp.chain] if sp.converged and not math.isinf(N) else None


def theory_sweep(
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


ABLATIONS = ("diagonal_only", "equalised_diagonal")
"""The two ablations of the theory's U (spec §9.1, 2-path variant), as `accuracy_<name>` in solve and sweep."""


def ablated_U(U: np.ndarray) -> dict[str, np.ndarray]:
    """The two ablations of U [n_paths, n_paths] (spec §9.1): `diagonal_only` (every off-diagonal entry zeroed)
    and `equalised_diagonal` (every diagonal entry set to U[0, 0], the first path's, U^{gg} in the Markov
    variants; off-diagonal entries kept)."""
    U = np.asarray(U, dtype=np.float64)
    return {
        "diagonal_only": np.diag(np.diag(U)),
        "equalised_diagonal": U - np.diag(np.diag(U)) + U[0, 0] * np.eye(len(U)),
    }


def ablations(data: PathData, U: np.ndarray, T: float) -> dict[str, float]:
    """Test accuracy of the theory's U (`full`) and of its two ablations (`ablated_U`), each through the predictor
    [P1] at temperature T. An ablated U that is not PSD has no kernel: its accuracy is NaN (reported, not
    raised)."""
    variants = {"full": np.asarray(U, dtype=np.float64), **ablated_U(U)}
    out = {}
    for name, V in variants.items():
        if np.linalg.eigvalsh(V)[0] < 0:
            out[name] = float("nan")
            continue
        out[name] = metrics(predict(V, data.gram, data.y_train, T, data.xit_test), data.y_test)["accuracy"]
    return out
