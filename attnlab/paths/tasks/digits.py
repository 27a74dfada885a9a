"""One-shot 2-way digit episodes from scikit-learn's bundled 8x8 digits (spec §9.2; an Omniglot substitute).

Train classes {0..5} (80% of their images; 20% held out as `val`), test classes {6..9}. An episode: a class pair
with random roles A/B, one support image each, a query from A (y=+1) or B (y=-1) different from that support.
Tokens: [4x4 patch (16) ; one-hot patch position (4) ; one-hot role (3)] in order A, B, query ->
x: [P, 12, 23]; mean readout. Labels exactly balanced (first P/2 are +1).
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from attnlab.errors import check

TRAIN_CLASSES = (0, 1, 2, 3, 4, 5)
TEST_CLASSES = (6, 7, 8, 9)
N_TOK = 12
N0 = 23
SEEDS = MappingProxyType({"train": 27, "val": 43, "test": 59})


def _pools() -> dict[str, dict[int, np.ndarray]]:
    """Standardised images [n, 8, 8] per split and class (split of train classes fixed by seed 0). Rebuilt on
    each call (about 20 ms) rather than cached in a module global."""
    from sklearn.datasets import load_digits

    d = load_digits()
    X = d.images.astype(np.float64) / 16.0
    y = d.target
    train_mask = np.isin(y, TRAIN_CLASSES)
    mu, sd = X[train_mask].mean(), X[train_mask].std()
    X = (X - mu) / sd
    rng = np.random.default_rng(0)
    pools: dict[str, dict[int, np.ndarray]] = {"train": {}, "val": {}, "test": {}}
    for c in TRAIN_CLASSES:
        idx = rng.permutation(np.flatnonzero(y == c))
        n_val = int(round(0.2 * len(idx)))
        pools["val"][c], pools["train"][c] = X[idx[:n_val]], X[idx[n_val:]]
    for c in TEST_CLASSES:
        pools["test"][c] = X[y == c]
    return pools


def tokenize(img: np.ndarray, role: int) -> np.ndarray:
    """One 8x8 image -> [4, 23] tokens (patches in raster order)."""
    toks = np.zeros((4, N0))
    for k, (r, c) in enumerate([(0, 0), (0, 4), (4, 0), (4, 4)]):
        toks[k, :16] = img[r : r + 4, c : c + 4].ravel()
        toks[k, 16 + k] = 1.0
        toks[k, 20 + role] = 1.0
    return toks


def digit_episodes(P: int, split: str = "train", seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """P episodes from `split` in {train, val, test}: x [P, 12, 23], y [P] (first P/2 are +1)."""
    check(P >= 2 and P % 2 == 0, f"P: balanced digit episodes need an even P >= 2, got {P}")
    check(split in ("train", "val", "test"), f"split must be train, val or test; got {split!r}")
    pool = _pools()[split]
    classes = sorted(pool)
    rng = np.random.default_rng(SEEDS[split] if seed is None else seed)
    y = np.r_[np.ones(P // 2), -np.ones(P // 2)]
    x = np.zeros((P, N_TOK, N0))
    for i in range(P):
        cA, cB = rng.choice(classes, size=2, replace=False)
        iA = rng.choice(len(pool[cA]), size=2, replace=False)
        iB = rng.choice(len(pool[cB]), size=2, replace=False)
        q = pool[cA][iA[1]] if y[i] > 0 else pool[cB][iB[1]]
        x[i] = np.concatenate([tokenize(pool[cA][iA[0]], 0), tokenize(pool[cB][iB[0]], 1), tokenize(q, 2)])
    return x, y


def episode_classes(split: str) -> tuple[int, ...]:
    """The digit classes a split draws from."""
    return tuple(sorted(_pools()[split]))
