"""What every study's `run(config, out)` returns: `RunResult` and its lazily built `Tables`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any


def frame(rows: list[dict]) -> Callable[[], Any]:
    """A table of `rows` for `RunResult.tables`, built as a pandas DataFrame when first read (importing pandas
    costs ≈ 0.25 s, which a CLI call that never reads the table should not pay)."""

    def build() -> Any:
        import pandas as pd

        return pd.DataFrame(rows)

    return build


class Tables(Mapping):
    """name -> DataFrame; a value given as a zero-argument callable is called on first access and kept."""

    def __init__(self, tables: Mapping[str, Any] | None = None) -> None:
        self._items = dict(tables or {})

    def __getitem__(self, name: str) -> Any:
        value = self._items[name]
        if callable(value):
            value = self._items[name] = value()
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Tables({', '.join(self._items)})"


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What every study's `run(config, out)` returns: the folder, the config, a summary and named tables.

    `tables` maps a name to a pandas DataFrame (e.g. `result.tables["heads"]`, built on first access); `summary`
    holds the final scalar metrics a report leads with.
    """

    path: Path
    config: Any
    summary: dict = dataclasses.field(default_factory=dict)
    tables: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.tables, Tables):
            object.__setattr__(self, "tables", Tables(self.tables))

    def __str__(self) -> str:
        return str(self.path)
