"""Reading a deploy run folder's saved tables and arrays (for its figures, report and claims): nothing is computed."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd


def slug(name: str) -> str:
    """A file name for a policy name ("sink+window 256" -> "sink-window-256")."""
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")


def read_table(path: str | Path, name: str = "perplexity.csv") -> pd.DataFrame:
    """A CSV of the run folder as a DataFrame (empty cells kept as "")."""
    return pd.read_csv(Path(path) / name, keep_default_na=False, na_values=["nan", "NaN"])


def window_arrays(path: str | Path, rows: list[dict]) -> dict[str, dict[str, np.ndarray]]:
    """{domain: {policy: per-position NLL [N, T−1]}} read back from path/nll/."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for r in rows:
        out.setdefault(r["domain"], {})[r["policy"]] = np.load(
            Path(path) / "nll" / r["domain"] / f"{slug(r['policy'])}.npy"
        )
    return out
