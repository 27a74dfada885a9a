"""Thresholds as code: a target's `Check`s against its measured numbers give met / missed / not run, and why.

A check compares one named number with a bound: `Check("attn_sink", ">=", 0.6)`. Operators: `<`, `<=`, `>`,
`>=`, `abs<=` (|x| <= bound) and `in` (lo <= x <= hi, bound a pair). A target is *met* when every check passes,
*missed* when one fails or its number is missing / not finite, *not run* when it has no numbers at all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from attnlab.core.targets import OPS, Check  # noqa: F401 - the checks' home, re-exported

MET, MISSED, NOT_RUN = "met", "missed", "not run"


def fmt(x: Any) -> str:
    """A number in 4 significant digits (ints and strings as they are)."""
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return str(x)
    if isinstance(x, int):
        return str(x)
    x = float(x)
    if not math.isfinite(x):
        return str(x)
    return f"{x:.4g}"


def verdict(checks: tuple[Check, ...], numbers: Mapping[str, Any] | None, reason: str = "") -> tuple[str, str]:
    """(verdict, why) of one target: `numbers` None means not run (`reason` says why)."""
    if numbers is None:
        return NOT_RUN, reason or "not run"
    if not checks:
        return NOT_RUN, reason or "no threshold in code for this target"
    parts, ok = [], True
    for c in checks:
        value = numbers.get(c.key)
        good = value is not None and c.passes(value)
        ok &= good
        parts.append(f"{c.text()}: {fmt(value)} {'yes' if good else 'NO'}")
    return (MET if ok else MISSED), "; ".join(parts)
