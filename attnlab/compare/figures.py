"""The comparison page's interactive figures (plotly JSON): every metric recorded over steps, one line per run
(`curves_figure`), and two scans side by side with their difference (`scan_pair_figure`: the layer x head grids of
a per-head statistic from each scan's heads.csv, a menu picking the domain and the statistic)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.compare.collect import RunInfo
from attnlab.reports.page import rounded

GRID_STATS = {"sink_score": "sink score", "row_entropy": "row entropy", "value_norm_ratio": "value-norm ratio"}


def relative(path: Path, page_dir: Path) -> str:
    """`path` relative to the page's folder (POSIX separators): what the page shows and links to."""
    return Path(os.path.relpath(path.resolve(), page_dir.resolve())).as_posix()


def curves_figure(runs: list[RunInfo], page_dir: Path) -> dict | None:
    """Every metric recorded over steps, one line per run; a menu picks the metric (the runs' common ones first)."""
    runs = [r for r in runs if r.curves]
    if not runs:
        return None
    names: list[str] = []
    for r in runs:
        names += [k for k in r.curves[-1] if k != "step" and k not in names and isinstance(r.curves[-1][k], float)]
    names.sort(key=lambda k: -sum(k in r.curves[-1] for r in runs))
    data, owner = [], []
    for i, name in enumerate(names):
        for r in runs:
            pts = [(c["step"], c[name]) for c in r.curves if isinstance(c.get(name), float)]
            if pts:
                x, y = zip(*pts)
                data.append({"type": "scatter", "mode": "lines+markers", "name": relative(r.path, page_dir),
                             "x": rounded(x), "y": rounded(y), "visible": i == 0})  # fmt: skip
                owner.append(i)
    buttons = [
        {"label": n, "method": "update", "args": [{"visible": [o == i for o in owner]}, {"title.text": n}]}
        for i, n in enumerate(names)
    ]
    return {
        "data": data,
        "layout": {
            "title": {"text": names[0] if names else ""},
            "xaxis": {"title": {"text": "step"}},
            "updatemenus": [{"buttons": buttons, "x": 0, "y": 1.18, "xanchor": "left"}],
            "margin": {"t": 90},
        },
    }


def head_grid(heads: Any, domain: str, stat: str) -> np.ndarray:
    """[L, H] values of `stat` on `domain` from a heads.csv table (NaN where a head has no row)."""
    g = heads[heads["domain"] == domain]
    z = np.full((int(g["layer"].max()) + 1, int(g["head"].max()) + 1), np.nan)
    z[g["layer"].astype(int), g["head"].astype(int)] = g[stat].astype(float)
    return z


def _views(a: Any, b: Any) -> list[tuple[str, np.ndarray, np.ndarray]]:
    shared = [d for d in dict.fromkeys(a["domain"]) if d in set(b["domain"])]
    stats = [s for s in GRID_STATS if s in a and s in b]
    views = [(f"{GRID_STATS[s]}: {d}", head_grid(a, d, s), head_grid(b, d, s)) for s in stats for d in shared]
    # a statistic neither scan measured (row entropy is NaN under the default fused statistics) has no view
    return [v for v in views if np.isfinite(v[1]).any() and np.isfinite(v[2]).any()]


HOVER = "<br>layer %{y}, head %{x}: %{z:.3f}<extra></extra>"
DIFF_HOVER = "second − first" + HOVER


def pair_traces(za: np.ndarray, zb: np.ndarray, names: list[str], same: bool) -> list[dict]:
    """Heat maps of the first and second grid on one colour scale, and second − first (when `same` shape)."""
    lo, hi = float(np.nanmin([np.nanmin(za), np.nanmin(zb)])), float(np.nanmax([np.nanmax(za), np.nanmax(zb)]))
    out = [
        {"type": "heatmap", "z": rounded(z), "xaxis": x, "yaxis": y, "zmin": lo, "zmax": hi, "colorscale": "Viridis",
         "showscale": i == 1, "name": n, "hovertemplate": n + HOVER}
        for i, (z, x, y, n) in enumerate([(za, "x", "y", names[0]), (zb, "x2", "y2", names[1])])
    ]  # fmt: skip
    if same:
        d = zb - za
        m = float(np.nanmax(np.abs(d))) or 1.0
        out.append({"type": "heatmap", "z": rounded(d), "xaxis": "x3", "yaxis": "y3", "zmin": -m, "zmax": m,
                    "colorscale": "RdBu", "showscale": False, "hovertemplate": DIFF_HOVER})  # fmt: skip
    return out


def pair_layout(n: int, names: list[str], title: str) -> dict[str, Any]:
    """`n` side-by-side panels (layer down, head across), each titled."""
    width = 1 / n
    layout: dict[str, Any] = {"title": {"text": title}, "height": 420, "margin": {"t": 90}}
    for i in range(n):
        s = "" if i == 0 else str(i + 1)
        layout[f"xaxis{s}"] = {"domain": [i * width + 0.02, (i + 1) * width - 0.04], "title": {"text": "head"},
                               "anchor": f"y{s}"}  # fmt: skip
        layout[f"yaxis{s}"] = {"autorange": "reversed", "title": {"text": "layer"}, "anchor": f"x{s}"}
    layout["annotations"] = [
        {"text": t, "showarrow": False, "xref": "paper", "yref": "paper", "x": (i + 0.45) * width, "y": 1.06}
        for i, t in enumerate([*names, "second − first"][:n])
    ]
    return layout


def scan_pair_figure(first: Any, second: Any, names: list[str]) -> dict | None:
    """The grids of two scans' heads.csv tables (`first`, `second`; DataFrames) and, when the models have the same
    layers and heads, second − first; `names`: the two runs as the page names them. None without a shared domain
    or statistic."""
    views = _views(first, second)
    if not views:
        return None
    same = views[0][1].shape == views[0][2].shape
    layout = pair_layout(3 if same else 2, names, views[0][0])
    buttons = [
        {"label": name, "method": "update",
         "args": [{"z": [t["z"] for t in pair_traces(za, zb, names, same)]}, {"title.text": name}]}
        for name, za, zb in views
    ]  # fmt: skip
    layout["updatemenus"] = [{"buttons": buttons, "x": 0, "y": 1.22, "xanchor": "left", "direction": "down"}]
    return {"data": pair_traces(views[0][1], views[0][2], names, same), "layout": layout}
