"""`attnlab scan` settings: a frozen config, validated before any work (spec extreme-tokens §10.3-§10.5)."""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.errors import check_int
from attnlab.hf.settings import check_head_pairs, check_window_settings


@dataclass(frozen=True)
class ScanConfig:
    """One scan: `samples` windows of `tokens` tokens per domain through `model`.

    domains: any of prose, code, random, and "text" with `text` (a UTF-8 file). prefix: token before each window
    (none, bos, eos or an id). align: window starts at seeded offsets ("random") or document starts ("doc").
    pattern_heads: (layer, head) whose full patterns are kept on the first window of each domain, plus the
    `n_auto_pattern_heads` heads with the largest sink-score shift between the first two domains.
    cache_dir: model cache root (None: $ATTNLAB_CACHE or ~/.cache/attnlab).
    """

    model: str = "smollm2"
    domains: tuple[str, ...] = ("prose", "code", "random")
    tokens: int = 128
    samples: int = 8
    seed: int = 0
    text: str | None = None
    prefix: str = "none"
    align: str = "random"
    batch_size: int = 1
    pattern_heads: tuple[tuple[int, int], ...] = ()
    n_auto_pattern_heads: int = 3
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "domains", tuple(self.domains))
        object.__setattr__(self, "pattern_heads", tuple(tuple(p) for p in self.pattern_heads))
        check_window_settings(self)
        check_head_pairs(self.pattern_heads, "pattern_heads")
        check_int(self.n_auto_pattern_heads, 0, "n_auto_pattern_heads")
