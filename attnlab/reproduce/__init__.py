"""`attnlab reproduce`: the specs' reproduction targets as code (spec thresholds, our numbers, verdicts).

    from attnlab.reproduce import ReproduceConfig, reproduce
    result = reproduce(ReproduceConfig(studies=("consensus",), profile="tiny"), out="runs/repro")
    result.tables["targets"]          # a pandas DataFrame: id, study, verdict, why

The registry of targets is `attnlab.reproduce.targets.TARGETS`. Importing this package is cheap.
"""

from __future__ import annotations

from typing import Any

from attnlab.reproduce.config import ReproduceConfig

__all__ = ["ReproduceConfig", "reproduce"]


def __getattr__(name: str) -> Any:
    if name == "reproduce":
        from attnlab.reproduce.run import reproduce

        return reproduce
    raise AttributeError(f"module 'attnlab.reproduce' has no attribute {name!r}")
