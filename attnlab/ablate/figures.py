"""Ablation figures, drawn from the rows of ablation.csv (matplotlib Figure objects, no pyplot); `report.py` calls
`ablation_figures(run)`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from attnlab.ablate.tables import read_rows
from attnlab.reports.page import heatmap, rounded
from attnlab.reports.plotting import new_figure, save_figure
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


# (heads.csv column, what it is) of the ΔNLL grid's views
DNLL_VIEWS = (("dnll_mean", "ΔNLL, head zeroed"), ("dnll_sink_mean", "ΔNLL, attention moved onto key 0"))


def dnll_grids(heads: pd.DataFrame, n_layers: int, n_heads: int) -> list[tuple[str, np.ndarray]]:
    """(name, [layer, head] ΔNLL) per domain and view of DNLL_VIEWS; heads that were not ablated are NaN."""
    out = []
    for col, what in DNLL_VIEWS:
        for d, g in heads.groupby("domain", sort=False):
            z = np.full((n_layers, n_heads), np.nan)
            z[g["layer"].astype(int), g["head"].astype(int)] = pd.to_numeric(g[col], errors="coerce")
            if np.isfinite(z).any():
                out.append((f"{what}: {d}", z))
    return out


def dnll_grid(run: RunDir) -> dict | None:
    """The layer × head grid coloured by ablation ΔNLL (issue 21), a menu per domain and kind of ablation, on a
    colour scale centred on 0 shared by every view; None when no head was ablated (or the run predates heads.csv)."""
    shape = run.read_manifest().get("heads_shape")
    if shape is None or not run.file("heads.csv").exists():
        return None
    grids = dnll_grids(pd.read_csv(run.file("heads.csv")), *shape)
    if not grids:
        return None
    top = max(float(np.nanmax(np.abs(z))) for _, z in grids) or 1.0
    scale = {"colorscale": "RdBu", "reversescale": True, "zmin": -top, "zmax": top}
    fig = heatmap(grids[0][1], grids[0][0], x=range(shape[1]), y=range(shape[0]), **scale)
    fig["data"][0]["hovertemplate"] = "layer %{y}, head %{x}<br>ΔNLL %{z:.4f} nats<extra></extra>"
    fig["layout"]["yaxis"] = {"title": {"text": "layer"}, "autorange": "reversed"}
    fig["layout"]["xaxis"] = {"title": {"text": "head"}}
    buttons = [
        {"label": name, "method": "update", "args": [{"z": [rounded(z)]}, {"title.text": name}]} for name, z in grids
    ]
    fig["layout"]["updatemenus"] = [{"buttons": buttons, "x": 0, "y": 1.15, "xanchor": "left", "direction": "down"}]
    fig["layout"]["margin"] = {"t": 80}
    return fig
