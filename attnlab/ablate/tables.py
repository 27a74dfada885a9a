"""ablation.csv of an ablation run folder read back as a DataFrame, for the run's result, its report and its
figures."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def read_rows(path: str | Path) -> pd.DataFrame:
    """ablation.csv as a DataFrame (empty "head" / "sink_score" / "state" cells kept as "")."""
    return pd.read_csv(Path(path) / "ablation.csv", keep_default_na=False, na_values=["nan", "NaN"])
