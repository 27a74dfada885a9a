"""One-shot 2-way digit episodes from scikit-learn's bundled 8x8 digits (spec §9.2; an Omniglot substitute).

Train classes {0..5} (80% of their images; 20% held out as `val`), test classes {6..9}. An episode: a class pair
with random roles A/B, one support image each, a query from A (y=+1) or B (y=-1) different from that support.
Tokens: [4x4 patch (16) ; one-hot patch position (4) ; one-hot role (3)] in order A, B, query ->
x: [P, 12, 23]; mean readout. Labels exactly balanced (first P/2 are +1).

`augment="dihedral"` (training episodes only; issue 39, B5's retuning under §15.4): one random element of the
dihedral group of the square (4 rotations by 90 degrees, each optionally transposed: 8 elements) is applied to all
three images of an episode (support A, support B and query alike), so a network sees 6 x 8 = 48 "classes" and must
compare rather than recognise. Labels, roles and the episodes drawn are those of `augment="none"`.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from attnlab.errors import check, check_choice

TRAIN_CLASSES = (0, 1, 2, 3, 4, 5)
TEST_CLASSES = (6, 7, 8, 9)
N_TOK = 12
N0 = 23
SEEDS = MappingProxyType({"train": 27, "val": 43, "test": 59})
AUGMENTS = ("none", "dihedral")
N_DIHEDRAL = 8


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


def dihedral(img: np.ndarray, k: int) -> np.ndarray:
    """Element k in 0..7 of the dihedral group of the square on an [8, 8] image: rotation by 90 * (k mod 4)
    degrees, then a transpose when k >= 4 (the four reflections). k = 0 is the identity."""
    out = np.rot90(img, k % 4)
    return np.ascontiguousarray(out.T if k >= 4 else out)


def check_augment(augment: str, split: str = "train") -> None:
    """One line for an unknown augmentation or one asked of validation/test episodes (never transformed)."""
    check_choice(augment, AUGMENTS, "--augment")
    check(
        augment == "none" or split == "train", f"--augment {augment}: only training episodes are augmented, not {split}"
    )


def digit_episodes(
    P: int, split: str = "train", seed: int | None = None, augment: str = "none"
) -> tuple[np.ndarray, np.ndarray]:
    """P episodes from `split` in {train, val, test}: x [P, 12, 23], y [P] (first P/2 are +1). With
    augment="dihedral" (train only) episode i's three images all get the dihedral element k_i (`dihedral`), k_i
    drawn from a second generator seeded [seed, 1], so the classes, images, roles and labels are those of
    augment="none" with the same seed."""
    check(P >= 2 and P % 2 == 0, f"P: balanced digit episodes need an even P >= 2, got {P}")
    check(split in ("train", "val", "test"), f"split must be train, val or test; got {split!r}")
    check_augment(augment, split)
    pool = _pools()[split]
    classes = sorted(pool)
    seed = SEEDS[split] if seed is None else seed
    rng = np.random.default_rng(seed)
    ks = np.random.default_rng([seed, 1]).integers(0, N_DIHEDRAL, size=P) if augment == "dihedral" else np.zeros(P)
    y = np.r_[np.ones(P // 2), -np.ones(P // 2)]
    x = np.zeros((P, N_TOK, N0))
    for i in range(P):
        cA, cB = rng.choice(classes, size=2, replace=False)
        iA = rng.choice(len(pool[cA]), size=2, replace=False)
        iB = rng.choice(len(pool[cB]), size=2, replace=False)
        q = pool[cA][iA[1]] if y[i] > 0 else pool[cB][iB[1]]
        imgs = [dihedral(img, int(ks[i])) for img in (pool[cA][iA[0]], pool[cB][iB[0]], q)]
        x[i] = np.concatenate([tokenize(img, role) for role, img in enumerate(imgs)])
    return x, y


def episode_classes(split: str) -> tuple[int, ...]:
    """The digit classes a split draws from."""
    return tuple(sorted(_pools()[split]))
