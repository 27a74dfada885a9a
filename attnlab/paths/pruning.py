"""Head scores from the order parameter U and pruning experiments (spec §8).

score(l, h) = sum_{pi_l = h} |U^{pi pi'}| + sum_{pi'_l = h} |U^{pi pi'}| - sum_{pi_l = pi'_l = h} |U^{pi pi'}|,
normalised by the maximum over all heads; lower = pruned first. U: [n_paths, n_paths], paths flattened h_1-slowest.
"""

from __future__ import annotations

import numpy as np

from attnlab.paths.errors import check


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


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation (scipy)."""
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def progressive_orders(scores: np.ndarray, n_random: int = 5, seed: int = 0) -> dict[str, list[int]]:
    """Head removal orders: ascending score, descending score and `n_random` random permutations."""
    rng = np.random.default_rng(seed)
    orders = {"ascending score": list(np.argsort(scores, kind="stable")),
              "descending score": list(np.argsort(-scores, kind="stable"))}
    for r in range(n_random):
        orders[f"random {r}"] = list(rng.permutation(len(scores)))
    return orders
