"""Building blocks shared by the CLI commands: task data -> scaled paths -> Gram, one theory point, GP baselines.

`PathData` holds the training/test scaled paths xit [P, n_paths, N0] / [n_test, n_paths, N0], labels and the config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from attnlab.paths.errors import check
from attnlab.paths.kernels import PathGram, check_memory, scaled_paths
from attnlab.paths.network import HeadSpec, PathConfig, PathNetwork
from attnlab.paths.predictor import alignment, gp_U, metrics, predict
from attnlab.paths.solver import SaddlePoint, solve
from attnlab.paths.theory import Problem

TASKS = ("markov", "digits")


@dataclass
class PathData:
    """Everything the theory needs for one dataset (float64)."""

    cfg: PathConfig
    gram: PathGram
    xit_test: torch.Tensor
    y_train: np.ndarray
    y_test: np.ndarray
    baselines: dict[str, list[int]]
    task: str

    @property
    def P(self) -> int:
        return self.gram.P


def random_qk_layers(H: list[int], N0: int, d_qk: int, seed: int) -> list[list[HeadSpec]]:
    """Random qk heads with entries N(0, 1/N0) (the untrained digits baseline)."""
    rng = np.random.default_rng(seed)
    return [[HeadSpec("qk", Q=rng.standard_normal((d_qk, N0)) / math.sqrt(N0),
                      K=rng.standard_normal((d_qk, N0)) / math.sqrt(N0), name=f"L{l + 1}H{h}")
             for h in range(n)] for l, n in enumerate(H)]


def build_data(task: str = "markov", P: int = 100, n_test: int = 1000, variant: str = "4path",
               heads: int = 2, layers: int = 2, d_qk: int = 16, seed: int = 0,
               cfg: PathConfig | None = None, memory_budget: float | None = None, gram_mode: str = "auto") -> PathData:
    """Draw the task, compute the attention and paths once, and build the Gram (memory checked first)."""
    check(task in TASKS, f"task must be one of {TASKS}, got {task!r}")
    check(P >= 2, f"P: need at least 2 training examples, got {P}")
    check(n_test >= 2, f"n_test: need at least 2 test examples, got {n_test}")
    if task == "markov":
        from attnlab.paths.tasks.markov import markov_config, markov_task

        cfg = cfg or markov_config(variant)
        t = markov_task(P, n_test, sigma_out=5.0 if variant == "2path" else 1.0)
        xtr, ytr, xte, yte = t.x_train, t.y_train, t.x_test, t.y_test
        base = {"g": [0], "g+d": [0, 2]} if variant == "4path" else ({"g": [0]} if variant == "2path" else {})
    else:
        from attnlab.paths.tasks.digits import N0, digit_episodes

        check(heads >= 1 and layers >= 1, f"heads and layers must be >= 1, got {heads}, {layers}")
        cfg = cfg or PathConfig(random_qk_layers([heads] * layers, N0, d_qk, seed + 1000),
                                tuple([10.0] * (layers + 1)), tuple([1.0] * (layers + 2)), "mean")
        xtr, ytr = digit_episodes(P, "train")
        xte, yte = digit_episodes(n_test, "test")
        base = {}
    n_tok, N0_ = xtr.shape[1], xtr.shape[2]
    mode = check_memory(P, cfg.n_paths, N0_, n_tok, sum(cfg.H), gram_mode, memory_budget)
    net = PathNetwork(cfg)
    xit = scaled_paths(net.paths(torch.tensor(xtr)), cfg.variances[0])
    xit_test = scaled_paths(net.paths(torch.tensor(xte)), cfg.variances[0])
    return PathData(cfg, PathGram(xit, mode), xit_test, ytr, yte, base, task)


def make_problem(data: PathData, N: float, T: float, form: str = "chain") -> Problem:
    L = data.cfg.L
    return Problem(data.gram, torch.tensor(data.y_train), T, data.cfg.H, tuple([float(N)] * (L + 1)),
                   data.cfg.variances, form)


def gp_baselines(data: PathData, T: float) -> dict[str, float]:
    """Test accuracy of GP regression with U = Sigma^2 I on all paths and on the task's restricted path sets."""
    S2 = float(np.prod(data.cfg.variances[1:]))
    out = {}
    for name, paths in {"all": None, **data.baselines}.items():
        pred = predict(gp_U(data.cfg.n_paths, S2, paths), data.gram, data.y_train, T, data.xit_test)
        out[name] = metrics(pred, data.y_test)["accuracy"]
    return out


def theory_point(data: PathData, N: float, T: float, form: str = "chain", method: str = "newton",
                 tol: float = 1e-8, init: list | None = None, max_iter: int = 500,
                 hessian: bool = True) -> tuple[SaddlePoint, dict]:
    """Solve one (N, T) point and evaluate it on the test set; returns (saddle point, metrics record)."""
    prob = make_problem(data, N, T, form)
    sp = solve(prob, method, tol=tol, init=init, max_iter=max_iter, hessian=hessian)
    m = metrics(predict(sp.U, data.gram, data.y_train, T, data.xit_test), data.y_test)
    gp = gp_baselines(data, T)
    n_paths = data.cfg.n_paths
    rec = {"N": N, "T": T, "P": data.P, "alpha": data.P / N, "alpha0": data.P / (data.gram.N0 * n_paths),
           "entropy_form": form, "converged": sp.converged, "iterations": sp.iterations, "max_grad": sp.max_grad,
           "hessian_min_eig": sp.hessian_min_eig, "action": sp.S, "energy": sp.E, "entropy": sp.entropy,
           "U": sp.U, "U_a": sp.U_a, "accuracy": m["accuracy"], "gauss_acc": m["gauss_acc"], "mse": m["mse"],
           "accuracy_gp": gp["all"], **{f"accuracy_gp_{k}": v for k, v in gp.items() if k != "all"},
           "cond_K": sp.cond_K, "jitter_added": 0.0, "wall_s": sp.wall_s, "method": sp.method}
    return sp, rec


def sweep(data: PathData, Ns: list[float], T: float, form: str = "chain", method: str = "newton",
          tol: float = 1e-8, progress: bool = True) -> list[tuple[SaddlePoint, dict]]:
    """Points from large to small N, each warm-started from the previous one; all share the Gram."""
    from tqdm import tqdm

    out, init = [], None
    for N in tqdm(sorted(Ns, reverse=True), desc="paths sweep", disable=not progress, file=None):
        sp, rec = theory_point(data, N, T, form, method, tol, init)
        out.append((sp, rec))
        init = [torch.tensor(u) for u in sp.chain] if sp.converged and not math.isinf(N) else None
    return out


def alignment_record(data: PathData, U: np.ndarray, top: int = 30) -> dict:
    """Kernel-task alignment of the renormalised and GP kernels."""
    S2 = float(np.prod(data.cfg.variances[1:]))
    return {"renormalised": alignment(U, data.gram, data.y_train, top),
            "gp": alignment(gp_U(data.cfg.n_paths, S2), data.gram, data.y_train, top)}


def ablations(data: PathData, U: np.ndarray, T: float) -> dict[str, float]:
    """Test accuracy of the theory's U and of two ablations (spec §9.1, 2-path variant): `diagonal_only` (off-diagonal
    entries zeroed) and `equalised_diagonal` (every diagonal entry set to U[0, 0], off-diagonal kept)."""
    U = np.asarray(U, dtype=np.float64)
    variants = {"full": U, "diagonal_only": np.diag(np.diag(U)),
                "equalised_diagonal": U - np.diag(np.diag(U)) + U[0, 0] * np.eye(len(U))}
    out = {}
    for name, V in variants.items():
        if np.linalg.eigvalsh(V)[0] < 0:  # an ablated U need not be PSD; report it instead of failing
            out[name] = float("nan")
            continue
        out[name] = metrics(predict(V, data.gram, data.y_train, T, data.xit_test), data.y_test)["accuracy"]
    return out
