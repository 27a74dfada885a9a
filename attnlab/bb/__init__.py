"""The Bigram-Backcopy study (`attnlab bb ...`): extreme-token phenomena on a toy transformer.

For notebooks: the configs and run functions, e.g.

    import attnlab.bb as bb
    result = bb.train(bb.TrainConfig(steps=100), out="runs/my-bb")
    result.tables["metrics"]          # a pandas DataFrame

Importing this package is cheap; torch and the study's modules load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from attnlab.bb.config import (
    CompareConfig,
    InterveneConfig,
    SampleConfig,
    SubspaceConfig,
    TheoryConfig,
    TrainConfig,
    resolve_config,
)

_RUN_FUNCTIONS = ("sample", "train", "intervene", "subspace", "theory", "compare")
__all__ = [
    "CompareConfig",
    "InterveneConfig",
    "SampleConfig",
    "SubspaceConfig",
    "TheoryConfig",
    "TrainConfig",
    "resolve_config",
    *_RUN_FUNCTIONS,
]


def __getattr__(name: str) -> Any:
    if name in _RUN_FUNCTIONS:
        return getattr(importlib.import_module("attnlab.bb.run"), name)
    raise AttributeError(f"module 'attnlab.bb' has no attribute {name!r}")
