"""Errors of the consensus study (spec section 9): bad input and step sizes that blow up."""

from __future__ import annotations

import difflib
from typing import Sequence

from attnlab.errors import AttnlabError


class ConsensusInputError(AttnlabError, ValueError):
    """Bad input to the consensus study; the message is one line naming the value and what is allowed."""


class StepSizeError(AttnlabError):
    """The integration left the sphere or produced a non-finite value (exit code 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=2)


def check_name(value: str, allowed: Sequence[str], what: str) -> str:
    """Return `value` if it is one of `allowed`, else raise with the valid names and the closest match."""
    if value in allowed:
        return value
    close = difflib.get_close_matches(str(value), list(allowed), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise ConsensusInputError(f"unknown {what} '{value}'; valid: {', '.join(allowed)}{hint}")


def check_size(value: int, minimum: int, what: str) -> int:
    """Return `value` if it is an integer >= `minimum`, else raise."""
    if int(value) != value or value < minimum:
        raise ConsensusInputError(f"{what} must be an integer >= {minimum}, got {value}")
    return int(value)
