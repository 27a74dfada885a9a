"""Hidden-Markov-chain classification (spec §9.1), with the hand-designed good, uniform and random heads.

x: [P, 31, 231] = BOS + 30 visible tokens, each [200 features ; one-hot position (31)]; y in {+1, -1}, the first P/2
are +1 (stay probability 0.7), the rest -1 (stay probability 0.3).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from attnlab.errors import check
from attnlab.paths.networks.architecture import HeadSpec, PathConfig

N_HIDDEN = 30
N_FEAT = 200
N_TOK = N_HIDDEN + 1
N0 = N_FEAT + N_TOK
BETA = 10.0
SEEDS = MappingProxyType(
    {"train": 27, "val": 43, "test": 59, "good": 127, "random1": 147, "uniform": 217, "random2": 247}
)


def _vectors() -> tuple[np.ndarray, np.ndarray]:
    vp = np.sqrt(2.0) * np.r_[np.ones(100), np.zeros(100)]
    vm = np.sqrt(2.0) * np.r_[np.zeros(100), np.ones(100)]
    return vp, vm


def markov_data(P: int, seed: int, sigma_out: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Draw P sequences: returns x [P, 31, 231] float64 and y [P] in {+1,-1} (first P/2 are +1)."""
    check(P >= 2 and P % 2 == 0, f"P: the balanced Markov task needs an even P >= 2, got {P}")
    rng = np.random.default_rng(seed)
    y = np.r_[np.ones(P // 2), -np.ones(P // 2)]
    stay = np.where(y > 0, 0.7, 0.3)
    s = np.empty((P, N_HIDDEN))
    s[:, 0] = rng.choice([-1.0, 1.0], size=P)
    for t in range(1, N_HIDDEN):
        keep = rng.random(P) < stay
        s[:, t] = np.where(keep, s[:, t - 1], -s[:, t - 1])
    vp, vm = _vectors()
    u1 = (vp + vm) / np.linalg.norm(vp + vm)
    u2 = (vp - vm) / np.linalg.norm(vp - vm)
    z = rng.standard_normal((P, N_HIDDEN, N_FEAT))
    c1, c2 = z @ u1, z @ u2
    perp = z - c1[..., None] * u1 - c2[..., None] * u2
    noise = c1[..., None] * u1 + c2[..., None] * u2 + sigma_out * perp
    feats = np.where(s[..., None] > 0, vp, vm) + noise
    x = np.zeros((P, N_TOK, N0))
    x[:, 1:, :N_FEAT] = feats
    x[:, :, N_FEAT:] = np.eye(N_TOK)
    return x, y


def _bilinear(F: np.ndarray, X: np.ndarray, Pos: np.ndarray) -> np.ndarray:
    return BETA * np.block([[F, X], [X.T, Pos]])


def good_head() -> HeadSpec:
    """Attends to the same-state predecessor (score 20), else BOS (15)."""
    vp, vm = _vectors()
    q = (vp - vm) / (np.sum((vp - vm) ** 2) / 2)
    Pos = np.zeros((N_TOK, N_TOK))
    for t in range(2, N_TOK):
        Pos[t - 1, t] = 1.0  # [key t-1, query t]
    Pos[0, 1:] = 1.5
    return HeadSpec("bilinear", W=_bilinear(np.outer(q, q), np.zeros((N_FEAT, N_TOK)), Pos), name="good")


def uniform_head() -> HeadSpec:
    """Constant scores: uniform attention."""
    return HeadSpec(
        "bilinear",
        W=_bilinear(np.zeros((N_FEAT, N_FEAT)), np.zeros((N_FEAT, N_TOK)), np.ones((N_TOK, N_TOK))),
        name="uniform",
    )


def blank_head() -> HeadSpec:
    """Zero weights: uniform attention (the 2-path variant's layer-1 partner)."""
    return HeadSpec("bilinear", W=np.zeros((N0, N0)), name="blank")


def random_head(seed: int, name: str) -> HeadSpec:
    """F ~ N(0,1)/200, Pos ~ N(0,1), X ~ N(0,1)/sqrt(200), all times beta."""
    rng = np.random.default_rng(seed)
    F = rng.standard_normal((N_FEAT, N_FEAT)) / N_FEAT
    Pos = rng.standard_normal((N_TOK, N_TOK))
    X = rng.standard_normal((N_FEAT, N_TOK)) / np.sqrt(N_FEAT)
    return HeadSpec("bilinear", W=_bilinear(F, X, Pos), name=name)


def markov_config(variant: str = "4path", N: float = 10.0) -> PathConfig:
    """`4path`: layer 1 {good, random1}, layer 2 {uniform, random2}; `2path`: {good, blank}, {uniform};
    `good1`: H=1, L=1 {good}; `good2`: H=1, L=2 {good},{uniform}. Last-token readout, unit variances."""
    if variant == "4path":
        layers = [
            [good_head(), random_head(SEEDS["random1"], "random1")],
            [uniform_head(), random_head(SEEDS["random2"], "random2")],
        ]
    elif variant == "2path":
        layers = [[good_head(), blank_head()], [uniform_head()]]
    elif variant == "good1":
        layers = [[good_head()]]
    elif variant == "good2":
        layers = [[good_head()], [uniform_head()]]
    else:
        check(False, f"variant must be one of 4path, 2path, good1, good2; got {variant!r}")
    L = len(layers)
    return PathConfig(layers, tuple([float(N)] * (L + 1)), tuple([1.0] * (L + 2)), "last")


@dataclass
class MarkovTask:
    """Train / validation / test sets of the Markov task."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    x_val: np.ndarray | None = None
    y_val: np.ndarray | None = None


def markov_task(
    P: int = 100, n_test: int = 1000, n_val: int = 0, sigma_out: float = 1.0, seeds: tuple[int, int, int] = (27, 59, 43)
) -> MarkovTask:
    """The standard sets: train seed 27, test seed 59, validation seed 43."""
    xtr, ytr = markov_data(P, seeds[0], sigma_out)
    xte, yte = markov_data(n_test, seeds[1], sigma_out)
    xv, yv = markov_data(n_val, seeds[2], sigma_out) if n_val else (None, None)
    return MarkovTask(xtr, ytr, xte, yte, xv, yv)
