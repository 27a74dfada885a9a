"""`attnlab scan` settings: a frozen config, validated before any work (spec extreme-tokens §10.3-§10.5)."""

from __future__ import annotations

from dataclasses import dataclass, field

from attnlab.errors import check, check_choice, check_count
from attnlab.hf.settings import WindowSettings, check_head_pairs


@dataclass(frozen=True)
class ScanConfig(WindowSettings):
    """One scan: `samples` windows of `tokens` tokens per domain through `model` (window fields: `WindowSettings`).

    pattern_heads: (layer, head) whose full patterns are kept on the first window of each domain, plus the
    `n_auto_pattern_heads` heads with the largest sink-score shift between the first two domains.
    checkpoints: (model, revision) pairs scanned one after another into one series table (`attnlab.scan.series`);
    empty for a single model.
    sink_ratio, sink_threshold: the authors' sink-head procedure (R24): a candidate sink token has a residual norm
    above sink_ratio × the window's median, and a head has a sink on it when its mean attention score is ≥
    sink_threshold.
    """

    pattern_heads: tuple[tuple[int, int], ...] = ()
    n_auto_pattern_heads: int = 3
    checkpoints: tuple[tuple[str, str | None], ...] = ()  # a checkpoint series: (model, revision) pairs
    # the authors' sink-head procedure (R24, attnlab.scan.sinkproc): candidates ‖x_i‖ > sink_ratio × median,
    # a sink when the mean attention score on the candidate is ≥ sink_threshold (omitted at their defaults, so
    # earlier scans keep their config hash)
    sink_ratio: float = field(default=10.0, metadata={"omit_if_default": True})
    sink_threshold: float = field(default=0.3, metadata={"omit_if_default": True})
    stats: str = field(default="fast", metadata={"omit_if_default": True})

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "pattern_heads", tuple(tuple(p) for p in self.pattern_heads))
        check_head_pairs(self.pattern_heads, "pattern_heads")
        check_count(self.n_auto_pattern_heads, 0, "n_auto_pattern_heads", 10_000)
        object.__setattr__(self, "checkpoints", tuple((str(m), r) for m, r in self.checkpoints))
        check(len(self.checkpoints) != 1, "checkpoints: a series needs at least two checkpoints (or none: one model)")
        check(
            isinstance(self.sink_ratio, (int, float)) and 1.0 < float(self.sink_ratio) < 1e6,
            f"sink_ratio must be a number above 1 (candidates: norm > ratio × median), got {self.sink_ratio!r}",
        )
        check(
            isinstance(self.sink_threshold, (int, float)) and 0.0 < float(self.sink_threshold) <= 1.0,
            f"sink_threshold must be in (0, 1] (a mean attention score), got {self.sink_threshold!r}",
        )
        check_choice(self.stats, ("fast", "full", "chunked"), "stats")
        check(len(set(self.checkpoints)) == len(self.checkpoints), f"checkpoints: {self.checkpoints} repeats one")
