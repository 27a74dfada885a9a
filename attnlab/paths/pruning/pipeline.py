"""Head scores from the order parameter U and the pruning experiments (spec §8, §9.3).

score(l, h) = sum_{pi_l = h} |U^{pi pi'}| + sum_{pi'_l = h} |U^{pi pi'}| - sum_{pi_l = pi'_l = h} |U^{pi pi'}|,
normalised by the maximum over all heads; lower = pruned first. U: [n_paths, n_paths], paths flattened h_1-slowest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from attnlab.errors import check
from attnlab.paths.networks.architecture import PathConfig, PathNetwork
from attnlab.paths.networks.kernels import scaled_paths
from attnlab.paths.pruning.gradient_descent import GDNetwork, accuracy, train_gd
from attnlab.paths.tasks.data import PathData, build_data
from attnlab.paths.tasks.digits import digit_episodes
from attnlab.paths.theory.points import theory_point
from attnlab.paths.theory.predictor import metrics, predict
from attnlab.paths.theory.solver import SaddlePoint

if TYPE_CHECKING:
    from attnlab.paths.config import PruneConfig


def head_scores(U: np.ndarray, H: list[int]) -> np.ndarray:
    """Scores [sum_l H_l], ordered layer by layer (layer 1 heads first), max-normalised."""
    U = np.abs(np.asarray(U, dtype=np.float64))
    n = int(np.prod(H))
    check(U.shape == (n, n), f"U: expected [{n}, {n}] for heads {H}, got {U.shape}")
    idx = np.array(np.unravel_index(np.arange(n), H)).T  # [n_paths, L] head of each layer
    out = []
    for l, Hl in enumerate(H):
        for h in range(Hl):
            m = idx[:, l] == h
            out.append(U[m].sum() + U[:, m].sum() - U[np.ix_(m, m)].sum())
    s = np.array(out)
    return s / s.max()


def head_labels(H: list[int]) -> list[tuple[int, int]]:
    """(layer, head) for each score entry."""
    return [(l, h) for l, Hl in enumerate(H) for h in range(Hl)]


def spearman(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Spearman rank correlation (scipy)."""
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def progressive_orders(scores: np.ndarray, n_random: int = 5, seed: int = 0) -> dict[str, list[int]]:
    """Head removal orders: ascending score, descending score and `n_random` random permutations."""
    rng = np.random.default_rng(seed)
    orders = {
        "ascending score": list(np.argsort(scores, kind="stable")),
        "descending score": list(np.argsort(-scores, kind="stable")),
    }
    for r in range(n_random):
        orders[f"random {r}"] = list(rng.permutation(len(scores)))
    return orders


# --- the pruning pipeline (spec §8, §9.3) ----------------------------------------------------------------------
def handoff_error(model: GDNetwork, cfg: PathConfig, x: np.ndarray) -> float:
    """max |attention of the trained float32 network - the theory's float64 attention| on x [B, n_tok, N0],
    layer 1 (the hand-off check: the theory recomputes the attention from the frozen Q/K)."""
    with torch.no_grad():
        a_gd = model.attention(torch.tensor(x, dtype=torch.float32), 0).double()
    a_th = PathNetwork(cfg).attention(torch.tensor(x))[0]
    return float((a_gd - a_th).abs().max())


def choose_point(
    data: PathData, x_val: np.ndarray, y_val: np.ndarray, Ns: Sequence[float], temperatures: Sequence[float]
) -> tuple[list[dict], float, float, SaddlePoint]:
    """Solve every (N, T) of the grid and keep the one with the best validation accuracy (first on ties):
    returns (grid rows, N, T, its saddle point)."""
    xit_val = scaled_paths(PathNetwork(data.cfg).paths(torch.tensor(x_val)))
    best: tuple[float, float, float, SaddlePoint] | None = None
    grid = []
    for N in Ns:
        for T in temperatures:
            sp, rec = theory_point(data, N, T, hessian=False)
            val = metrics(predict(sp.U, data.gram, data.y_train, T, xit_val), y_val)["accuracy"]
            grid.append({"N": N, "T": T, "val_accuracy": val, "test_accuracy": rec["accuracy"],
                         "accuracy_gp": rec["accuracy_gp"], "converged": rec["converged"]})  # fmt: skip
            if best is None or val > best[0]:
                best = (val, N, T, sp)
    assert best is not None  # the config guarantees a non-empty grid
    return grid, best[1], best[2], best[3]


def single_head_drops(model: GDNetwork, labels: list[tuple[int, int]], acc_full: float, x, y) -> list[float]:
    """Test-accuracy drop of the GD network when each (layer, head) alone is pruned."""
    drops = []
    for lh in labels:
        model.set_pruned([lh])
        drops.append(acc_full - accuracy(model, x, y))
    model.set_pruned([])
    return drops


def progressive_curves(
    model: GDNetwork, scores: np.ndarray, H: list[int], acc_full: float, x, y, seed: int
) -> dict[str, list[float]]:
    """Accuracy after removing heads one by one in ascending-score, descending-score and 5 random orders; a
    curve stops before it would remove the last head of a layer."""
    labels = head_labels(H)
    curves = {}
    for name, order in progressive_orders(scores, 5, seed).items():
        accs, removed = [acc_full], []
        for i in order:
            removed.append(labels[i])
            if sum(1 for l, _ in removed if l == labels[i][0]) >= H[labels[i][0]]:
                break  # never remove the last head of a layer
            model.set_pruned(removed)
            accs.append(accuracy(model, x, y))
        curves[name] = accs
    model.set_pruned([])
    return curves


def theory_drops(
    cfg: PathConfig, P: int, n_test: int, N: float, T: float, labels: list[tuple[int, int]]
) -> list[float]:
    """Theory-side analogue of single-head pruning: refit U without the head (its layer's head sum then has
    H_l - 1 terms, and the path normalisation 1/sqrt(n_paths) of [K1] rescales accordingly)."""
    _, rec = theory_point(build_data("digits", P, n_test, cfg=cfg), N, T, hessian=False)
    out = []
    for l, h in labels:
        layers = [[hd for k, hd in enumerate(heads) if (i, k) != (l, h)] for i, heads in enumerate(cfg.layers)]
        sub = PathConfig(layers, cfg.widths, cfg.variances, cfg.readout)
        _, r = theory_point(build_data("digits", P, n_test, cfg=sub), N, T, hessian=False)
        out.append(rec["accuracy"] - r["accuracy"])
    return out


def train_network(config: PruneConfig) -> tuple[GDNetwork, list[dict]]:
    """The GD network of `config`, trained (explicit generators seeded with config.seed; no global RNG)."""
    model = GDNetwork(23, config.heads, config.layers, config.width, config.d_qk, "mean", config.seed)
    log = train_gd(model, config.steps, seed=config.seed, pool_size=config.pool)
    return model, log


def prune_pipeline(config: PruneConfig, model: GDNetwork, log: list[dict]) -> dict:
    """Hand the trained network's Q/K to the theory, choose (N, T) on validation episodes, score the heads and
    compare with the GD and theory pruning drops; returns the JSON-ready record of `metrics.json`."""
    xte, yte = digit_episodes(config.n_test, "test")
    xva, yva = digit_episodes(500, "val")
    acc_full = accuracy(model, xte, yte)
    cfg = model.to_config()
    handoff = handoff_error(model, cfg, xte[:50])
    data = build_data("digits", config.P, config.n_test, cfg=cfg)
    grid, N, T, sp = choose_point(data, xva, yva, config.Ns, config.temperatures)
    scores, labels = head_scores(sp.U, cfg.H), head_labels(cfg.H)
    drops = single_head_drops(model, labels, acc_full, xte, yte)
    th_drops = theory_drops(cfg, config.P, config.n_test, N, T, labels)
    curves = progressive_curves(model, scores, cfg.H, acc_full, xte, yte, config.seed)
    order = np.argsort(scores)
    return {
        "gd_test_accuracy": acc_full, "gd_val_accuracy": accuracy(model, xva, yva),
        "handoff_attention_err": handoff, "chosen_N": N, "chosen_T": T, "grid": grid, "score": scores,
        "acc_drop": drops, "spearman_rho": spearman(scores, drops), "heads": [f"L{l + 1}H{h}" for l, h in labels],
        "drops_lowest2": [drops[i] for i in order[:2]], "drops_highest2": [drops[i] for i in order[-2:]],
        "progressive": curves, "U": sp.U, "train_log": log,
        "theory_accuracy": float(next(g["test_accuracy"] for g in grid if g["N"] == N and g["T"] == T)),
        "theory_acc_drop": th_drops, "spearman_rho_theory": spearman(scores, th_drops),
    }  # fmt: skip
