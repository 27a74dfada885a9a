"""Snapshot steps: step 0, every `lin_every` up to `lin_until`, then `per_decade` per decade (log), and the
last step."""

from __future__ import annotations

import numpy as np


def snapshot_steps(total: int, lin_every: int, lin_until: int, per_decade: int) -> list[int]:
    steps = set(range(0, min(lin_until, total) + 1, lin_every))
    if total > lin_until:
        lo, hi = np.log10(max(lin_until, 1)), np.log10(total)
        n = max(int(np.ceil((hi - lo) * per_decade)), 1)
        steps |= {int(round(s)) for s in np.logspace(lo, hi, n + 1)}
    steps.add(total)
    return sorted(s for s in steps if 0 <= s <= total)
