"""Shared figure helpers: Agg backend, consistent size, save-and-close."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 4.5, height: float = 3.4, **kw):
    """A figure with an `nrows x ncols` grid of axes (always a 2-D array via `squeeze=False`)."""
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kw)
    return fig, axes


def save_figure(fig, path: str | Path) -> Path:
    """Save as PNG at 110 dpi with a tight layout and close the figure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
