"""Ablation figures, drawn from the rows of ablation.csv (matplotlib Figure objects, no pyplot); `report.py` calls
`ablation_figures(run)`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnlab.ablate.tables import read_rows
from attnlab.plotting import new_figure, save_figure
from attnlab.runs import RunDir


def ablation_figures(run: RunDir) -> dict[str, Path]:
    """ablation_dnll and, when a zeroed head has a sink score, ablation_vs_sink, from the run's ablation.csv."""
    rows = read_rows(run.path).to_dict("records")
    figs = {"ablation_dnll": ablation_bars(rows, run.figure_path("ablation_dnll"))}
    scatter = ablation_scatter(rows, run.figure_path("ablation_vs_sink"))
    return figs if scatter is None else {**figs, "ablation_vs_sink": scatter}


def ablation_bars(rows: list[dict], path: Path) -> Path:
    """ΔNLL (mean ± s.e. over samples) per condition and domain."""
    conds = list(dict.fromkeys(r["condition"] for r in rows))
    ds = list(dict.fromkeys(r["domain"] for r in rows))
    fig, axes = new_figure(1, 1, width=max(5.0, 0.45 * len(conds) * len(ds) + 2), height=3.6)
    ax = axes[0][0]
    w = 0.8 / len(ds)
    for k, d in enumerate(ds):
        sel = {r["condition"]: r for r in rows if r["domain"] == d}
        y = [sel[c]["dnll_mean"] if c in sel else np.nan for c in conds]
        e = [sel[c]["dnll_se"] if c in sel else 0 for c in conds]
        ax.bar(np.arange(len(conds)) + k * w, y, w, yerr=e, label=d)
    ax.set_xticks(np.arange(len(conds)) + 0.4 - w / 2)
    ax.set_xticklabels(conds, rotation=60, ha="right", fontsize=7)
    ax.axhline(0, color="gray", lw=0.7)
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_ylabel("Δ next-token NLL (nats)")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def ablation_scatter(rows: list[dict], path: Path) -> Path | None:
    """ΔNLL against the head's sink score on that domain (one point per zeroed head and domain)."""
    pts = [
        r
        for r in rows
        if r.get("sink_score") not in (None, "") and np.isfinite(float(r["sink_score"])) and r["kind"] == "head"
    ]
    if not pts:
        return None
    fig, axes = new_figure(1, 1, width=5.0, height=3.6)
    ax = axes[0][0]
    for d in dict.fromkeys(r["domain"] for r in pts):
        sel = [r for r in pts if r["domain"] == d]
        ax.scatter([r["sink_score"] for r in sel], [r["dnll_mean"] for r in sel], s=14, label=d)
    ax.axhline(0, color="gray", lw=0.7)
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_xlabel("sink score of the zeroed head")
    ax.set_ylabel("Δ next-token NLL (nats)")
    ax.legend(fontsize=7)
    return save_figure(fig, path)
