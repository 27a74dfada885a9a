"""`attnlab scan` settings: a frozen config, validated before any work (spec extreme-tokens §10.3-§10.5)."""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.errors import check_int
from attnlab.hf.settings import WindowSettings, check_head_pairs


@dataclass(frozen=True)
class ScanConfig(WindowSettings):
    """One scan: `samples` windows of `tokens` tokens per domain through `model` (window fields: `WindowSettings`).

    pattern_heads: (layer, head) whose full patterns are kept on the first window of each domain, plus the
    `n_auto_pattern_heads` heads with the largest sink-score shift between the first two domains.
    """

    pattern_heads: tuple[tuple[int, int], ...] = ()
    n_auto_pattern_heads: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "pattern_heads", tuple(tuple(p) for p in self.pattern_heads))
        check_head_pairs(self.pattern_heads, "pattern_heads")
        check_int(self.n_auto_pattern_heads, 0, "n_auto_pattern_heads")
