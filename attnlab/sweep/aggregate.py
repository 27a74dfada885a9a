"""Seed as a grid axis is aggregated, not drawn: the trials that differ only in `seed` give one row with the mean
of the metric, its 95 % interval (Student's t over the seeds: mean ± t_{0.975, n-1} s / sqrt(n)) and n."""

from __future__ import annotations

from typing import Any

import numpy as np

SEED = "seed"
LEVEL = 0.95


def axes_without_seed(swept: list[str]) -> list[str]:
    """The swept fields a figure draws against: every one but the seed."""
    return [f for f in swept if f != SEED]


def t_quantile(n: int) -> float:
    """t_{0.975, n-1}: the two-sided 95 % quantile of Student's t with n - 1 degrees of freedom (nan for n < 2)."""
    if n < 2:
        return float("nan")
    from scipy.stats import t

    return float(t.ppf(0.5 + LEVEL / 2, n - 1))


def seed_summary(table: Any, metric: str, axes: list[str]) -> Any:
    """One row per combination of `axes` over the finished trials: `metric` mean, the 95 % interval's low and
    high ends, its half-width and the number of seeds n (an interval needs n >= 2: nan otherwise)."""
    import pandas as pd

    done = table[table["status"] == "done"]
    groups = done.groupby(axes, sort=True) if axes else [((), done)]
    rows = []
    for key, g in groups:
        values = pd.to_numeric(g[metric], errors="coerce").dropna().to_numpy(dtype=float)
        n = len(values)
        mean = float(values.mean()) if n else float("nan")
        half = t_quantile(n) * float(values.std(ddof=1)) / np.sqrt(n) if n >= 2 else float("nan")
        keys = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(axes, keys)), f"{metric} mean": mean, "95% low": mean - half,
                     "95% high": mean + half, "± (95%)": half, "seeds": n})  # fmt: skip
    return pd.DataFrame(rows)
