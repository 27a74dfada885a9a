"""attnlab: the mechanics of attention on toy and real transformers.

The API a notebook needs. Each study is a sub-package with its configs and run functions, imported on first use:

    import attnlab
    result = attnlab.bb.train(attnlab.bb.TrainConfig(steps=50), out="runs/bb-notebook")
    result.tables["metrics"]          # a pandas DataFrame

In memory, for any model (nothing is written to disk; docs/api.md works through it):

    tr = attnlab.trace(model, ids, interventions=[attnlab.ZeroHead(1, 0)], hooks={"blocks.1.attn.hook_z": fn})
    tr.heads                          # one row per (layer, head): sink_score, row_entropy, value_norm_key0, ...
    attnlab.hook_points(model)        # TransformerLens's names: blocks.{l}.hook_resid_pre, attn.hook_z, ...
    attnlab.heads_view(tr, 1)         # in Jupyter: layer 1's heads as thumbnails, one enlarged (pattern_view too)
    model = attnlab.load_model("smollm2"); run = attnlab.load_run("runs/scan-...")

The four studies, each made of rooms (one room per command, `attnlab.<room>`), on shared layers:

    study                          rooms                          reproduction
    Extreme tokens, toy model      bb                             bb/repro/
    Extreme tokens, real models    scan, series, ablate, deploy   real/repro/
    Consensus                      consensus                      consensus/repro/
    Attention paths                paths                          paths/repro/
    tools over runs                sweep, reproduce, compare, view

    shared layers: toy (toy transformer, Bigram-Backcopy task), hf (real-model loading, text domains),
    tracing (Trace, recorder, adapters, interventions; speed paths in tracing.fast), training (loop, checkpoints),
    reports (pages, plotting), runs (run folders), core (room table, CLI helpers, devices), errors

docs/design.md draws the layout and the contract every room follows.
"""

from __future__ import annotations

import importlib
from typing import Any

from attnlab.core.registry import study_rooms
from attnlab.errors import AttnlabError, InputError, NumericalError
from attnlab.runs import RunDir, RunResult

__version__ = "0.1.0"
__all__ = [
    "AttnlabError",
    "InputError",
    "NumericalError",
    "RunDir",
    "RunResult",
    "__version__",
    *study_rooms(),
    "tracing",
    "trace",
    "hook_points",
    "load_model",
    "load_trace",
    "load_run",
    "ZeroHead",
    "ZeroMLP",
    "ZeroLayer",
    "ZeroDims",
    "MoveToSink",
    "MeanAblate",
    "pattern_view",
    "heads_view",
]
# the study sub-packages (from the one table in attnlab.core.registry) and the trace layer, imported on first access
_LAZY = (*study_rooms(), "tracing")
# name -> the module that defines it, imported on first access (so `attnlab.trace` costs nothing until called)
VERBS = {
    "trace": "attnlab.api",
    "hook_points": "attnlab.api",
    "load_model": "attnlab.api",
    "load_trace": "attnlab.api",
    "load_run": "attnlab.runs.results",
    "pattern_view": "attnlab.view.inline",
    "heads_view": "attnlab.view.inline",
    **dict.fromkeys(
        ("ZeroHead", "ZeroMLP", "ZeroLayer", "ZeroDims", "MoveToSink", "MeanAblate"), "attnlab.tracing.interventions"
    ),  # fmt: skip
}


def __getattr__(name: str) -> Any:
    """Import a study sub-package or a verb's module on first access (`attnlab.bb`, `attnlab.trace`), so
    `import attnlab` stays cheap."""
    if name in _LAZY:
        return importlib.import_module(f"attnlab.{name}")
    if name in VERBS:
        return getattr(importlib.import_module(VERBS[name]), name)
    raise AttributeError(f"module 'attnlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
