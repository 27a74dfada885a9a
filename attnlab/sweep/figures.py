"""Sweep figures from `sweep.csv`: the chosen metric against the swept fields (a heat map for two of them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from attnlab.plotting import new_figure, save_figure

# the metric a sweep of each command is drawn by (the first numeric metric otherwise)
PRIMARY_METRIC = {
    "bb train": "attn_sink",
    "consensus simulate": "final_clustered_fraction_mean",
    "paths solve": "accuracy",
    "scan": "heads_above_0.5_percent",
}


def swept_fields(table: Any, fields: list[str]) -> list[str]:
    """The fields that take more than one value across the trials."""
    return [f for f in fields if f in table and table[f].astype(str).nunique() > 1]


def pick_metric(table: Any, command: str, fields: list[str]) -> str | None:
    """The command's primary metric if present, else the first numeric column that is no field."""
    if PRIMARY_METRIC.get(command) in table:
        return PRIMARY_METRIC[command]
    skip = set(fields) | {"trial", "status", "error"}
    numeric = [c for c in table.columns if c not in skip and np.issubdtype(table[c].dtype, np.number)]
    return numeric[0] if numeric else None


def metric_figure(table: Any, metric: str, swept: list[str], path: Path, seeds: Any = None) -> Path | None:
    """A heat map of `metric` (mean over other fields) for two swept fields, else lines against the first; with
    `seeds` (`aggregate.seed_summary` over `swept`), the line has the 95 % interval over seeds as error bars."""
    done = table[table["status"] == "done"]
    if done.empty or not swept:
        return None
    if len(swept) >= 2:
        grid = done.pivot_table(index=swept[0], columns=swept[1], values=metric, aggfunc="mean")
        fig, axes = new_figure(width=5.5, height=4.2)
        ax = axes[0, 0]
        im = ax.imshow(grid.to_numpy(dtype=float), aspect="auto", cmap="viridis")
        ax.set_yticks(range(len(grid.index)), [str(v) for v in grid.index])
        ax.set_xticks(range(len(grid.columns)), [str(v) for v in grid.columns])
        ax.set_ylabel(swept[0])
        ax.set_xlabel(swept[1])
        fig.colorbar(im, ax=ax, label=f"{metric} (mean over other fields)")
        return save_figure(fig, path)
    fig, axes = new_figure(width=5.5, height=4.0)
    if seeds is not None and len(swept) == 1:
        x = [str(v) for v in seeds[swept[0]]]
        y, err = seeds[f"{metric} mean"].to_numpy(dtype=float), seeds["± (95%)"].to_numpy(dtype=float)
        axes[0, 0].errorbar(x, y, yerr=np.nan_to_num(err), fmt="o-", capsize=3)
        axes[0, 0].set_ylabel(f"{metric} (mean over seeds ± 95 % interval)")
    else:
        mean = done.groupby(swept[0])[metric].mean()
        axes[0, 0].plot([str(v) for v in mean.index], mean.to_numpy(dtype=float), "o-")
        axes[0, 0].set_ylabel(metric)
    axes[0, 0].set_xlabel(swept[0])
    return save_figure(fig, path)
