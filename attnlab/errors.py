"""One error type for bad input: the CLI prints its message as a single line and exits non-zero."""

from __future__ import annotations


class AttnlabError(Exception):
    """Bad input or an unrecoverable run condition, with a message meant for the user.

    `exit_code` is what the CLI returns (1 for bad input, 2 for a diverged run).
    """

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def require(condition: bool, message: str) -> None:
    """Raise `AttnlabError(message)` unless `condition` holds."""
    if not condition:
        raise AttnlabError(message)
