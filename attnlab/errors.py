"""The one error module: bad input and numerical failure, each a one-line message with an exit code.

`AttnlabError` is what the CLI catches: it prints `attnlab: error: <message>` on one line and exits with
`exit_code`. Library code raises `InputError` (bad config, bad file, too big for memory or time; exit 1) or
`NumericalError` (a diverged or non-finite run; exit 2), usually through `check()`.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path


class AttnlabError(Exception):
    """A failure with a message meant for the user; `exit_code` is what the CLI returns."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class InputError(AttnlabError, ValueError):
    """Bad input: a config field, a file, a size too big for memory or time. Exit code 1."""


class NumericalError(AttnlabError, ArithmeticError):
    """A run that diverged or produced non-finite values; the message names where. Exit code 2."""

    exit_code = 2


def check(condition: object, message: str, error: type[AttnlabError] = InputError) -> None:
    """Raise `error(message)` unless `condition` holds."""
    if not condition:
        raise error(message)


def check_choice(value: str, allowed: Sequence[str], what: str) -> str:
    """Return `value` if it is one of `allowed`, else raise naming the valid values and the closest match."""
    if value in allowed:
        return value
    close = difflib.get_close_matches(str(value), list(allowed), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise InputError(f"unknown {what} '{value}'; valid: {', '.join(allowed)}{hint}")


def names(value: object, what: str) -> tuple[str, ...]:
    """`value` as a tuple of names: one string is one name (`domains="prose"` is `("prose",)`, never its letters)."""
    if isinstance(value, str):
        return (value,)
    try:
        items: tuple[object, ...] = tuple(value)  # type: ignore[arg-type]
    except TypeError:
        raise InputError(f"{what} must be a name or a list of names, got {value!r}") from None
    for item in items:
        check(isinstance(item, str), f"{what} must be a name or a list of names, got {value!r}")
    return tuple(str(item) for item in items)


def folders(value: object) -> tuple[str, ...]:
    """`value` as a tuple of folder names: one string or path is one folder (never its letters)."""
    import os

    if isinstance(value, (str, os.PathLike)):
        return (os.fspath(value),)
    return tuple(os.fspath(v) if isinstance(v, os.PathLike) else str(v) for v in value)  # type: ignore[attr-defined]


def regular_file(path: object, what: str) -> Path:
    """`path` as a Path if it names a regular file (a link to one counts), else one line naming the real cause:
    empty, does not exist, is a folder, or is another kind of file (a FIFO, a device such as /dev/zero, a
    socket), which a command would block on or read without end. Nothing is opened."""
    import os
    import stat

    text = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
    if not text.strip():
        raise InputError(f"{what}: the path is empty; name a file")
    p = Path(text).expanduser()
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise InputError(f"{what} {p} does not exist") from None
    except NotADirectoryError:
        raise InputError(f"{what} {p} does not exist (a part of the path is a file, not a folder)") from None
    except OSError as exc:
        raise InputError(f"{what} {p} cannot be read: {(exc.strerror or str(exc)).lower()}") from None
    if stat.S_ISDIR(mode):
        raise InputError(f"{what} {p} is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise InputError(f"{what} {p} is not a regular file ({_file_kind(mode)}); name a file")
    return p


def _file_kind(mode: int) -> str:
    import stat

    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "not a plain file")


def check_int(value: object, minimum: int, what: str, maximum: int | None = None) -> int:
    """Return `value` as an int if it is an integer in [minimum, maximum], else raise naming `what`."""
    ok = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    ok = ok and not isinstance(value, bool)  # a float NaN or inf is not an integer (and int() of it would raise)
    if not ok or value < minimum or (maximum is not None and value > maximum):  # type: ignore[operator]
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        shown = f"{value:.3g}" if isinstance(value, int) and abs(value) >= 10**15 else repr(value)
        raise InputError(f"{what} must be an integer {bound}, got {shown}")
    return int(value)  # type: ignore[call-overload]


def check_count(value: object, minimum: int, what: str, maximum: int) -> int:
    """`check_int(value, minimum, what)`, then an upper bound: "must be an integer in [minimum, maximum]"."""
    n = check_int(value, minimum, what)
    if n > maximum:
        shown = f"{value:.3g}" if isinstance(value, float) or n >= 10**15 else repr(value)
        raise InputError(f"{what} must be an integer in [{minimum}, {maximum}], got {shown}")
    return n


def check_finite(value: float, what: str, positive: bool = False) -> float:
    """Return `value` if it is a finite number (and > 0 when `positive`), else raise naming `what`."""
    import math

    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(x) or (positive and x <= 0):
        raise InputError(f"{what} must be a finite {'positive ' if positive else ''}number, got {value!r}")
    return x
