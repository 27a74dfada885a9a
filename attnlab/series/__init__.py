"""`attnlab series train`: a small transformers GPT-2 or Llama trained on Bigram-Backcopy (with `<s>` at position 0),
saved as a HF checkpoint series for `attnlab scan --model RUN/checkpoints` (spec extreme-tokens §14, R25).

    from attnlab.series import SeriesTrainConfig, train_series
    result = train_series(SeriesTrainConfig(steps=200, save_every=20), out="runs/series")

Importing this package is cheap; torch and transformers load on first use.
"""

from __future__ import annotations

from typing import Any

from attnlab.series.config import SeriesTrainConfig

__all__ = ["SeriesTrainConfig", "train_series"]


def __getattr__(name: str) -> Any:
    if name == "train_series":
        from attnlab.series.run import train_series

        return train_series
    raise AttributeError(f"module 'attnlab.series' has no attribute {name!r}")
