"""Error types of the attention-paths study (spec §12); all are `AttnlabError`, so the CLI prints one line."""

from __future__ import annotations

from attnlab.errors import AttnlabError


class PathsConfigError(AttnlabError):
    """A bad argument: wrong shape, non-positive width/variance/temperature, too few examples."""


class KernelConditionError(AttnlabError):
    """K + T I is not positive definite to working precision, or a user kernel needed jitter and failed."""


class MemoryBudgetError(AttnlabError):
    """The estimated memory of a run exceeds the budget; raised before anything large is allocated."""


def check(cond: bool, message: str) -> None:
    """Raise `PathsConfigError(message)` unless `cond` holds."""
    if not cond:
        raise PathsConfigError(message)
