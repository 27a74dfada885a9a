"""One trace format for toy and real models (spec extreme-tokens §5).

`TraceRecorder` reduces attention patterns (whole, or in query chunks), logits, value norms and residual streams on
the fly inside hooks (memory O(L·H·(T+V)), never O(B·L·H·T²) unless full patterns are asked for); `Trace` holds
the result. Adapters in `attnlab.tracing.adapters` feed it from a model; `attnlab.tracing.interventions` is the one
intervention vocabulary they compile.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Trace", "TraceRecorder"]
PUBLIC = {"Trace": "attnlab.tracing.format", "TraceRecorder": "attnlab.tracing.recorder"}


def __getattr__(name: str) -> Any:
    """`Trace` and `TraceRecorder` on first access: importing the package (or its value modules) needs no torch."""
    if name in PUBLIC:
        return getattr(importlib.import_module(PUBLIC[name]), name)
    raise AttributeError(f"module 'attnlab.tracing' has no attribute {name!r}")
