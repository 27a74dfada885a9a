"""Atomic `.npz` files for a run folder (`RunDir` has `save_npy` for single arrays)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from attnlab.runs import write_bytes


def save_npz(path: str | Path, **arrays: np.ndarray) -> Path:
    """Save named arrays as one uncompressed `.npz` (as `np.savez`), written atomically."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return write_bytes(path, buf.getvalue())
