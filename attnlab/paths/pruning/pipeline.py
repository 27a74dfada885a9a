"""Head scores from the order parameter U and the pruning experiments (spec §8, §9.3).

score(l, h) = sum_{pi_l = h} |U^{pi pi'}| + sum_{pi'_l = h} |U^{pi pi'}| - sum_{pi_l = pi'_l = h} |U^{pi pi'}|,
normalised by the maximum over all heads; lower = pruned first. U: [n_paths, n_paths], paths flattened h_1-slowest.

Device (`paths prune --device`): the GD training and every theory solve run there (the theory's kernels built on
the cpu and copied); the trained network comes back to the cpu for its evaluations (forward passes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from attnlab.errors import check
from attnlab.paths.networks.architecture import PathConfig, PathNetwork
from attnlab.paths.networks.kernels import PathGram, scaled_paths
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
    data: PathData,
    x_val: np.ndarray,
    y_val: np.ndarray,
    Ns: Sequence[float],
    temperatures: Sequence[float],
    gram: PathGram | None = None,
) -> tuple[list[dict], float, float, SaddlePoint]:
    """Solve every (N, T) of the grid (on `gram`: the data's, or its copy on a device) and keep the one with the
    best validation accuracy (first on ties): returns (grid rows, N, T, its saddle point)."""
    xit_val = scaled_paths(PathNetwork(data.cfg).paths(torch.tensor(x_val)))
    best: tuple[float, float, float, SaddlePoint] | None = None
    grid = []
    for N in Ns:
        for T in temperatures:
            sp, rec = theory_point(data, N, T, hessian=False, gram=gram)
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


def _drop_point(cfg: PathConfig, P: int, n_test: int, N: float, T: float, device: torch.device | None) -> float:
    """Test accuracy of the theory at (N, T) on digit data with the heads of `cfg` (solved on `device`)."""
    data = build_data("digits", P, n_test, cfg=cfg)
    gram = None if device is None else data.gram.to(device)
    return theory_point(data, N, T, hessian=False, gram=gram)[1]["accuracy"]


def theory_drops(
    cfg: PathConfig,
    P: int,
    n_test: int,
    N: float,
    T: float,
    labels: list[tuple[int, int]],
    device: torch.device | None = None,
) -> list[float]:
    """Theory-side analogue of single-head pruning: refit U without the head (its layer's head sum then has
    H_l - 1 terms, and the path normalisation 1/sqrt(n_paths) of [K1] rescales accordingly). Solves on `device`
    (default the cpu)."""
    full = _drop_point(cfg, P, n_test, N, T, device)
    out = []
    for l, h in labels:
        layers = [[hd for k, hd in enumerate(heads) if (i, k) != (l, h)] for i, heads in enumerate(cfg.layers)]
        sub = PathConfig(layers, cfg.widths, cfg.variances, cfg.readout)
        out.append(full - _drop_point(sub, P, n_test, N, T, device))
    return out


def train_network(config: PruneConfig, device: torch.device | None = None) -> tuple[GDNetwork, list[dict]]:
    """The GD network of `config`, trained on `device` (default the cpu) and returned on the cpu. Its initial
    weights are drawn on the cpu (explicit generators seeded with config.seed; no global RNG) and copied, so
    every device starts from the same network."""
    model = GDNetwork(23, config.heads, config.layers, config.width, config.d_qk, "mean", config.seed)
    if device is not None and device.type != "cpu":
        model.to(device)
    log = train_gd(model, config.steps, lr=config.lr, weight_decay=config.weight_decay, seed=config.seed,
                   pool_size=config.pool, augment=config.augment)  # fmt: skip
    return model.to("cpu"), log


def check_prune_memory(config: PruneConfig, gram_mode: str, device: torch.device) -> None:
    """One line when the GD network's training (`PruneConfig.gd_bytes`) and the largest theory solve (digit
    paths, `heads^layers` of them) would not fit together in a GPU's memory; nothing on the cpu."""
    from attnlab.paths.tasks.digits import N0
    from attnlab.paths.theory.action import order_parameter_sizes
    from attnlab.paths.theory.solver import device_bytes
    from attnlab.runs.budget import check_device_memory

    H = [config.heads] * config.layers
    n_paths = int(np.prod(H))
    theory = device_bytes(config.P, n_paths, N0, gram_mode, order_parameter_sizes(H, "chain"))
    what = f"paths prune --width {config.width} --heads {config.heads} --layers {config.layers} --P {config.P}"
    check_device_memory(config.gd_bytes() + theory, what, device, "choose smaller sizes or --device cpu")


def prune_pipeline(config: PruneConfig, model: GDNetwork, log: list[dict], device: torch.device | None = None) -> dict:
    """Hand the trained network's Q/K to the theory, choose (N, T) on validation episodes, score the heads and
    compare with the GD and theory pruning drops; returns the JSON-ready record of `metrics.json`."""
    xte, yte = digit_episodes(config.n_test, "test")
    xva, yva = digit_episodes(500, "val")
    acc_full = accuracy(model, xte, yte)
    cfg = model.to_config()
    handoff = handoff_error(model, cfg, xte[:50])
    data = build_data("digits", config.P, config.n_test, cfg=cfg)
    gram = None if device is None else data.gram.to(device)
    grid, N, T, sp = choose_point(data, xva, yva, config.Ns, config.temperatures, gram)
    scores, labels = head_scores(sp.U, cfg.H), head_labels(cfg.H)
    drops = single_head_drops(model, labels, acc_full, xte, yte)
    th_drops = theory_drops(cfg, config.P, config.n_test, N, T, labels, device)
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
