"""The comparison page's interactive figure: every metric recorded over steps, one line per run (plotly JSON)."""

from __future__ import annotations

import os
from pathlib import Path

from attnlab.compare.collect import RunInfo
from attnlab.report import rounded


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
