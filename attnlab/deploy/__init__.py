"""`attnlab deploy`: why extreme tokens matter in practice (spec extreme-tokens §14, R23) — perplexity of a real
causal LM under fake int8 activation quantisation with and without its massive outlier channels, and under a
sliding-window KV policy with and without the attention sink.

    from attnlab.deploy import QuantizeConfig, SlidingWindowConfig, quantize, window
    q = quantize(QuantizeConfig(samples=2), out="runs/my-quant")
    w = window(SlidingWindowConfig(samples=2, windows=(128,)), out="runs/my-window")
    q.tables["perplexity"], w.tables["perplexity"]      # pandas DataFrames

Importing this package is cheap; torch and transformers load on first use.
"""

from __future__ import annotations

from typing import Any

from attnlab.deploy.config import QuantizeConfig, SlidingWindowConfig

__all__ = ["QuantizeConfig", "SlidingWindowConfig", "quantize", "window"]


def __getattr__(name: str) -> Any:
    if name in ("quantize", "window"):  # importing the run module pulls in torch and transformers
        from attnlab.deploy import run

        return getattr(run, name)
    raise AttributeError(f"module 'attnlab.deploy' has no attribute {name!r}")
