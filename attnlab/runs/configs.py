"""Configs as frozen dataclasses: read back from `config.json` with one-line errors for unknown or bad fields.

Every study's config is a frozen dataclass whose `__post_init__` validates its fields and names the bad one.
`config_from_dict(cls, data)` rebuilds one from its JSON form (lists become tuples where the field is a tuple,
nested dataclasses are rebuilt), which is what `attnlab rerun` and `--resume` use.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar

from attnlab.errors import InputError

C = TypeVar("C")


def _convert(tp: Any, value: Any) -> Any:
    """Coerce a JSON value to the annotated type `tp` where the JSON form loses it (tuples, nested configs)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(members[0], value) if len(members) == 1 else value
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        return config_from_dict(tp, value)  # type: ignore[arg-type]
    if origin is tuple and isinstance(value, list):
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        return tuple(_convert(inner, v) for v in value)
    if origin is list and isinstance(value, list):
        inner = (typing.get_args(tp) or (Any,))[0]
        return [_convert(inner, v) for v in value]
    if tp is float and isinstance(value, (int, str)) and not isinstance(value, bool):
        return float(value)  # "inf" / "-inf" as written by to_jsonable
    return value


def config_from_dict(cls: type[C], data: dict) -> C:
    """Build the frozen dataclass `cls` from `data` (its JSON form); unknown fields are a one-line error."""
    if not isinstance(data, dict):
        raise InputError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise InputError(f"{cls.__name__}: unknown field(s) {', '.join(unknown)}; valid: {', '.join(fields)}")
    hints = typing.get_type_hints(cls)
    kwargs = {name: _convert(hints.get(name, Any), value) for name, value in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise InputError(f"{cls.__name__}: {exc}") from None


def config_to_dict(config: Any) -> dict:
    """The JSON form of a config dataclass (as written to `config.json`)."""
    from attnlab.runs import to_jsonable

    return to_jsonable(config)
