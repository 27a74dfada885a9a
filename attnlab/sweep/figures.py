"""Sweep figures from `sweep.csv`: the chosen metric against the swept fields (a heat map for two of them).

`sweep_figures(path)` draws the PNG of a sweep folder (`sweep.csv`, `trials.json`, `config.json`); `line_view` and
`grid_view` are the report's interactive views of the same table (plotly JSON).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from attnlab.reports.page import heatmap, rounded, words
from attnlab.reports.plotting import new_figure, save_figure
from attnlab.runs import RunDir
from attnlab.sweep.aggregate import SEED, axes_without_seed, seed_summary

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


def read_sweep(run: RunDir) -> tuple[Any, str, str | None, list[str]]:
    """(sweep.csv as a DataFrame, the spec's command, the metric the run chose to draw (view.json), the trials'
    field names) of a sweep folder."""
    import pandas as pd

    table = pd.read_csv(run.path / "sweep.csv")
    command, metric = run.read_config()["spec"]["command"], run.read_json("view.json")["metric"]
    return table, command, metric, run.read_json("trials.json")["fields"]


def metric_view(table: Any, metric: str | None, fields: list[str]) -> tuple[list[str], Any]:
    """(the swept fields other than the seed, the mean and 95 % interval of `metric` over seeds or None)."""
    swept = swept_fields(table, fields)
    axes = axes_without_seed(swept)
    summary = seed_summary(table, metric, axes) if metric is not None and SEED in swept else None
    return axes, summary


def sweep_figures(path: Path) -> dict[str, Path]:
    """`figures/sweep_<metric>.png`: the metric against the swept fields (the seed averaged over, never an axis)."""
    run = RunDir(path)
    table, _, metric, fields = read_sweep(run)
    axes, summary = metric_view(table, metric, fields)
    fig = metric_figure(table, metric, axes, run.figure_path(f"sweep_{metric}"), summary) if metric else None
    return {f"sweep_{metric}": fig} if fig is not None else {}


def line_view(table: Any, metric: str, axis: str, summary: Any) -> dict:
    """A plotly line of `metric` against `axis` (category axis, as the values were given); with seeds, the mean
    and 95 % interval as error bars."""
    if summary is not None:
        x, y, err = summary[axis].astype(str).tolist(), summary[f"{metric} mean"], summary["± (95%)"]
        trace = {"type": "scatter", "mode": "lines+markers", "x": x, "y": rounded(y),
                 "error_y": {"type": "data", "array": rounded(err), "visible": True}}  # fmt: skip
    else:
        done = table[table["status"] == "done"]
        mean = done.groupby(axis)[metric].mean()
        trace = {"type": "scatter", "mode": "lines+markers", "x": [str(v) for v in mean.index],
                 "y": rounded(mean.to_numpy(dtype=float))}  # fmt: skip
    layout = {"xaxis": {"title": {"text": axis}, "type": "category"}, "yaxis": {"title": {"text": words(metric)}},
              "margin": {"t": 30}, "height": 380}  # fmt: skip
    return {"data": [trace], "layout": layout}


def grid_view(table: Any, metric: str, axes: list[str]) -> dict:
    """A plotly heat map of `metric` over two swept fields (mean over the rest), values as given on the axes."""
    done = table[table["status"] == "done"]
    grid = done.pivot_table(index=axes[0], columns=axes[1], values=metric, aggfunc="mean")
    hover = f"{axes[0]} %{{y}}<br>{axes[1]} %{{x}}<br>{words(metric)} %{{z:.4g}}<extra></extra>"
    x, y = [str(v) for v in grid.columns], [str(v) for v in grid.index]
    fig = heatmap(grid.to_numpy(dtype=float), words(metric), x, y, hovertemplate=hover)
    fig["layout"]["xaxis"] = {"title": {"text": axes[1]}, "type": "category", "automargin": True}
    fig["layout"]["yaxis"] = {"title": {"text": axes[0]}, "type": "category", "autorange": "reversed"}
    fig["layout"]["height"] = 420
    return fig
