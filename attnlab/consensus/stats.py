"""Summary statistics for curves over starts or prompts (spec section 6, Decision on bands).

Curves are `[batch, time]`. The band is the 95% percentile-bootstrap CI of the mean of log10 E (2,000 seeded
resamples); the line is the median. Values are floored at `floor` (default 1e-17, below the float64 resolution
of 1 - cos) before the log, so an exact 0 does not dominate a mean of logs.
"""

from __future__ import annotations

import numpy as np


def log_band(E: np.ndarray, resamples: int = 2000, seed: int = 0, floor: float = 1e-17) -> dict[str, np.ndarray]:
    """For E `[batch, time]`: median, mean of log10 E and its bootstrap CI (lo, hi), quantiles q10/q90 (`[time]`)."""
    E = np.asarray(E, dtype=np.float64)
    L = np.log10(np.maximum(E, floor))
    B = L.shape[0]
    rng = np.random.default_rng(seed)
    counts = np.stack([np.bincount(rng.integers(0, B, B), minlength=B) for _ in range(resamples)]) / B
    L_fin = np.where(np.isfinite(L), L, 0.0)
    boot = counts @ L_fin  # [resamples, time]
    return {
        "median": np.median(E, 0),
        "mean_log10": L_fin.mean(0),
        "lo_log10": np.percentile(boot, 2.5, 0),
        "hi_log10": np.percentile(boot, 97.5, 0),
        "q10": np.quantile(E, 0.1, 0),
        "q90": np.quantile(E, 0.9, 0),
    }


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation of two 1-D arrays (scipy)."""
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic)


def timeseries_rows(t: np.ndarray, curves: dict[str, np.ndarray], measure: str, every: int = 1) -> list[dict]:
    """Rows for `timeseries.csv`: per time point and group, the median, mean log10, its CI and q10/q90."""
    rows = []
    for group, E in curves.items():
        band = log_band(E[:, ::every])
        for k, tk in enumerate(np.asarray(t)[::every]):
            rows.append(
                {"t": float(tk), "measure": measure, "group": group, **{key: float(v[k]) for key, v in band.items()}}
            )
    return rows


def roughness_slope(y: np.ndarray, r: np.ndarray, resamples: int = 4000, seed: int = 0) -> tuple[float, float, float]:
    """R10's slope against roughness: the least-squares slope of y `[schedule, prompt]` (e.g. final mean log10 E
    per prompt) on each schedule's roughness r `[schedule]`, pooled over prompts (every schedule runs the same
    prompts, so it is the slope of the schedules' means), and its 95 % percentile bootstrap interval over prompts
    (one resample of prompt indices used for every schedule, keeping them paired). Returns (slope, low, high)."""
    y, r = np.asarray(y, dtype=np.float64), np.asarray(r, dtype=np.float64)
    if y.ndim != 2 or y.shape[0] != r.size or r.size < 2 or np.ptp(r) == 0:
        raise ValueError(f"need y [schedule, prompt] and >= 2 distinct roughnesses, got {y.shape} and {r}")
    rc = r - r.mean()

    def slope(means: np.ndarray) -> np.ndarray:  # means [..., schedule]
        return (means - means.mean(-1, keepdims=True)) @ rc / (rc @ rc)

    idx = np.random.default_rng(seed).integers(0, y.shape[1], size=(resamples, y.shape[1]))
    boot = slope(y[:, idx].mean(-1).T)  # y[:, idx]: [schedule, resamples, prompt]
    low, high = np.percentile(boot, [2.5, 97.5])
    return float(slope(y.mean(1))), float(low), float(high)
