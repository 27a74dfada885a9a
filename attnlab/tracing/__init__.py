"""One trace format for toy and real models (spec extreme-tokens §5).

`TraceRecorder` reduces attention patterns (whole, or in query chunks), logits, value norms and residual streams on
the fly inside hooks (memory O(L·H·(T+V)), never O(B·L·H·T²) unless full patterns are asked for); `Trace` holds
the result. Adapters in `attnlab.tracing.adapters` feed it from a model; `attnlab.tracing.interventions` is the one
intervention vocabulary they compile.
"""

from attnlab.tracing.format import Trace
from attnlab.tracing.recorder import TraceRecorder

__all__ = ["Trace", "TraceRecorder"]
