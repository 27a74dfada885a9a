"""A head's state from its sink score, as every real-model command reads it (spec extreme-tokens §13.7, the paper's
protocol): *dormant* (a sink) on a domain if its sink score s_h >= DORMANT (0.5), *active* if s_h < ACTIVE (0.3),
else between. Shared by `scan` (head classes, `attnlab.scan.analysis`) and `ablate` (the state of a zeroed head)."""

from __future__ import annotations

DORMANT = 0.5
ACTIVE = 0.3


def state_of(sink_score: float) -> str:
    """A head's state on one domain from its sink score: dormant (≥ DORMANT), active (< ACTIVE) or between."""
    return "dormant" if sink_score >= DORMANT else ("active" if sink_score < ACTIVE else "between")
