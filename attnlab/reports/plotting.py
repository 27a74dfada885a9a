"""Shared figure helpers: matplotlib `Figure` objects drawn off-screen, a consistent size, atomic PNG saves.

No pyplot and no backend switch: a `matplotlib.figure.Figure` renders PNG through Agg by itself, so library code
never changes matplotlib's global state.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from attnlab.runs import write_bytes


def new_figure(
    ncols: int = 1, nrows: int = 1, width: float = 4.5, height: float = 3.4, **kw: Any
) -> tuple[Figure, Any]:
    """A figure with an `nrows x ncols` grid of axes (always a 2-D array: `axes[row, col]`)."""
    fig = Figure(figsize=(width * ncols, height * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Save as PNG at 110 dpi with a tight layout, atomically."""
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return write_bytes(path, buf.getvalue())
