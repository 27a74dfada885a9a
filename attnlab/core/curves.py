"""Reading a metric's curve along training steps, shared by the rooms that draw it (scan's figures) and the
reproduction that judges it (R25 in `attnlab/bb/repro/verdicts.py`)."""

from __future__ import annotations

import numpy as np


def onset(steps: list[int], values: list[float], rising: bool, fraction: float = 0.5) -> int | None:
    """The first step at which a metric has made `fraction` (half) of its total change, the change from the first
    checkpoint to its extreme in the claimed direction (max when `rising`, else min); None when it never moves
    that way."""
    v = np.asarray(values, dtype=float)
    total = (v.max() if rising else v.min()) - v[0]
    if total == 0 or (total < 0) == rising:
        return None
    progress = (v - v[0]) / total
    return int(steps[int(np.argmax(progress >= fraction))])
