"""The image-like synthetic problem of benchmark B2 (spec §13): P = 600, N0 = 192, n_tok = 48.

An example is a 48 x 64 RGB image cut into a 6 x 8 grid of 8 x 8 patches in raster order; a token is one patch,
flattened (8 * 8 * 3 = 192 features). The image is a sinusoidal grating of random frequency (0.08-0.2 cycles
per pixel), phase and colour, at an orientation near horizontal for class +1 and near vertical for class -1 (within
±30 degrees of its axis), with a random bright blob, a weak vertical brightness ramp whose sign is the label
(±0.25 from top to bottom: the part a linear readout can see) and pixel noise (sd 1 against a grating amplitude of
0.5), so a single patch says little and the label is spread over the tokens. The first P/2 examples are +1, the
rest -1. Pixels are standardised with the training set's mean and sd per feature (the test set reuses them).
Seeded: train 27, test 59, as the other tasks; the same seed gives the same arrays.
"""

from __future__ import annotations

import numpy as np

from attnlab.errors import check

HEIGHT, WIDTH, CHANNELS, PATCH = 48, 64, 3, 8
N_TOK = (HEIGHT // PATCH) * (WIDTH // PATCH)  # 48
N0 = PATCH * PATCH * CHANNELS  # 192
TRAIN_SEED, TEST_SEED = 27, 59


def grating_images(P: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """P images [P, 48, 64, 3] and labels [P] in {+1, -1} (first P/2 are +1), as the module docstring draws them."""
    check(P >= 2 and P % 2 == 0, f"P: the balanced image task needs an even P >= 2, got {P}")
    rng = np.random.default_rng(seed)
    y = np.r_[np.ones(P // 2), -np.ones(P // 2)]
    angle = np.where(y > 0, 0.0, np.pi / 2) + rng.uniform(-np.pi / 6, np.pi / 6, P)
    freq = rng.uniform(0.08, 0.2, P) * 2 * np.pi
    phase = rng.uniform(0, 2 * np.pi, P)
    colour = rng.dirichlet(np.ones(CHANNELS), P)  # [P, 3]
    r, c = np.meshgrid(np.arange(HEIGHT), np.arange(WIDTH), indexing="ij")
    proj = np.cos(angle)[:, None, None] * r + np.sin(angle)[:, None, None] * c  # [P, H, W]
    grating = 0.5 * np.sin(freq[:, None, None] * proj + phase[:, None, None])
    centre = rng.uniform([0, 0], [HEIGHT, WIDTH], (P, 2))
    blob = np.exp(-((r - centre[:, 0, None, None]) ** 2 + (c - centre[:, 1, None, None]) ** 2) / (2 * 6.0**2))
    ramp = 0.25 * y[:, None, None] * (2 * r / (HEIGHT - 1) - 1)
    img = (grating + blob + ramp)[..., None] * (CHANNELS * colour[:, None, None, :])
    return img + rng.standard_normal(img.shape), y


def patches(img: np.ndarray) -> np.ndarray:
    """[P, 48, 64, 3] -> tokens [P, 48, 192]: 8 x 8 patches in raster order, each flattened (row, column, channel)."""
    P = img.shape[0]
    g = img.reshape(P, HEIGHT // PATCH, PATCH, WIDTH // PATCH, PATCH, CHANNELS)
    return g.transpose(0, 1, 3, 2, 4, 5).reshape(P, N_TOK, N0)


def image_task(P: int = 600, n_test: int = 1000) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train [P, 48, 192], y_train [P], x_test [n_test, 48, 192], y_test), standardised with the training
    set's per-feature mean and sd."""
    xtr, ytr = grating_images(P, TRAIN_SEED)
    xte, yte = grating_images(n_test, TEST_SEED)
    xtr, xte = patches(xtr), patches(xte)
    mu, sd = xtr.mean((0, 1)), xtr.std((0, 1)) + 1e-12
    return (xtr - mu) / sd, ytr, (xte - mu) / sd, yte
