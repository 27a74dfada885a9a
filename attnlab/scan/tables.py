"""The tables of a scan run folder (heads.csv, layers.csv ...) read back as DataFrames, for the run's result, its
report and its figures."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

TABLES = (
    "heads",
    "layers",
    "massive",
    "classes",
    "sink_candidates",
    "sink_layers",
    "sink_heads_authors",
    "sinks",
    "sink_levels",
)


def read_table(path: Path) -> pd.DataFrame:
    """One CSV of a run folder as a DataFrame (empty strings kept as ""; an empty file gives an empty frame)."""
    if not path.is_file() or path.stat().st_size == 0:
        return pd.DataFrame()
    return pd.read_csv(path, keep_default_na=False, na_values=["nan", "NaN"])


def read_tables(path: str | Path) -> dict[str, pd.DataFrame]:
    """The scan's tables: heads, layers, massive, classes and the sink-head procedure's three."""
    return {name: read_table(Path(path) / f"{name}.csv") for name in TABLES}
