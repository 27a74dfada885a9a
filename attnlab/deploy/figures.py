"""`attnlab deploy` figures, drawn from the rows of perplexity.csv and the saved NLL arrays (no pyplot).

Run-folder entry points (the run calls them before its report): `quantize_figures` (`figures/perplexity.png`) and
`window_figures` (`figures/perplexity.png`, `figures/nll_by_position.png`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnlab.deploy.tables import read_table, window_arrays
from attnlab.reports.plotting import new_figure, save_figure
from attnlab.runs import RunDir


def perplexity_bars(rows: list[dict], key: str, path: Path, title: str) -> Path:
    """Perplexity (log scale) per condition (`row[key]`) and domain, the value printed above each bar."""
    conds = list(dict.fromkeys(r[key] for r in rows))
    ds = list(dict.fromkeys(r["domain"] for r in rows))
    fig, axes = new_figure(1, 1, width=max(5.0, 0.55 * len(conds) * len(ds) + 2.5), height=3.8)
    ax = axes[0][0]
    w = 0.8 / len(ds)
    for k, d in enumerate(ds):
        sel = {r[key]: float(r["perplexity"]) for r in rows if r["domain"] == d}
        y = np.array([sel.get(c, np.nan) for c in conds])
        x = np.arange(len(conds)) + k * w
        ax.bar(x, y, w, label=d)
        for xi, yi in zip(x, y):
            if np.isfinite(yi):
                ax.text(xi, yi, f"{yi:.3g}", ha="center", va="bottom", fontsize=6, rotation=90)
    ax.set_xticks(np.arange(len(conds)) + 0.4 - w / 2)
    ax.set_xticklabels(conds, rotation=35, ha="right", fontsize=7)
    ax.set_yscale("log")
    ppl = [float(r["perplexity"]) for r in rows if np.isfinite(float(r["perplexity"]))] or [1.0]
    ax.set_ylim(min(ppl) / 2, max(ppl) * 8)  # room for the printed values
    ax.set_ylabel("perplexity (log scale)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def nll_by_position(arrays: dict[str, dict[str, np.ndarray]], path: Path, smooth: int = 32) -> Path:
    """Mean NLL against the query position (running mean over `smooth` positions), one panel per domain.
    arrays: {domain: {policy: [N, T−1] per-position NLL}}."""
    fig, axes = new_figure(len(arrays), 1, width=4.6, height=3.4)
    for ax, (domain, by_policy) in zip(axes[0], arrays.items()):
        for name, pos in by_policy.items():
            m = pos.mean(0)
            k = max(1, min(smooth, len(m)))
            ax.plot(np.arange(len(m) - k + 1) + k - 1, np.convolve(m, np.ones(k) / k, mode="valid"), label=name)
        ax.set_title(domain, fontsize=9)
        ax.set_xlabel("query position i (predicting i + 1)")
        ax.set_ylabel(f"mean NLL (running mean of {smooth})")
        ax.legend(fontsize=7)
    return save_figure(fig, path)


def quantize_figures(path: str | Path) -> dict[str, Path]:
    """`figures/perplexity.png` of a `deploy quantize` run from its perplexity.csv."""
    run = RunDir(path)
    rows = read_table(run.path).to_dict("records")
    return {
        "perplexity": perplexity_bars(rows, "label", run.figure_path("perplexity"), "Perplexity under quantisation")
    }


def window_figures(path: str | Path) -> dict[str, Path]:
    """`figures/perplexity.png` and `figures/nll_by_position.png` of a `deploy window` run from its perplexity.csv
    and nll/<domain>/<policy>.npy ([N, T−1] each)."""
    run = RunDir(path)
    rows = read_table(run.path).to_dict("records")
    return {
        "perplexity": perplexity_bars(rows, "policy", run.figure_path("perplexity"), "Perplexity per KV policy"),
        "nll_by_position": nll_by_position(window_arrays(run.path, rows), run.figure_path("nll_by_position")),
    }
