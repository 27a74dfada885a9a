"""From a spec to trials: expand the grid / list / random draws, and build each trial's config through the
command's own command-line parser, so a trial is exactly what `attnlab <command> --field value ...` would run.

Every command's parser sets `make_config(args) -> config` beside `func`; the sweep parses the trial's fields as
options (`lr` -> `--lr`), calls `make_config`, and names the trial by the config's hash.
"""

from __future__ import annotations

import argparse
import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnlab.errors import InputError, check
from attnlab.runs import config_hash
from attnlab.sweep.config import SweepSpec, check_trial_count

RESERVED = frozenset({"out", "overwrite", "resume", "threads", "help"})


@dataclass(frozen=True)
class Trial:
    """One trial: its id (the config hash), the fields as given in the spec, and the resolved config."""

    id: str
    fields: dict[str, Any]
    config: Any


def expand(spec: SweepSpec) -> list[dict[str, Any]]:
    """The trials' fields in a stable order: grid combinations, then [[list]] entries, then random draws."""
    rows: list[dict[str, Any]] = []
    if spec.grid:
        names = list(spec.grid)
        rows += [dict(zip(names, combo, strict=True)) for combo in itertools.product(*spec.grid.values())]
    rows += [dict(t) for t in spec.trials]
    if spec.random:
        rows += _random_draws(spec.random)
    return [{**spec.base, **row} for row in rows]


def _random_draws(random: dict[str, Any]) -> list[dict[str, Any]]:
    rng = np.random.default_rng(int(random.get("seed", 0)))
    draws = []
    for _ in range(int(random["n"])):
        row = {}
        for name, law in random["fields"].items():
            if isinstance(law, list):
                row[name] = law[int(rng.integers(len(law)))]
            elif isinstance(law, dict) and {"low", "high"} <= set(law):
                lo, hi = float(law["low"]), float(law["high"])
                row[name] = (
                    float(np.exp(rng.uniform(np.log(lo), np.log(hi)))) if law.get("log") else float(rng.uniform(lo, hi))
                )
            else:
                raise InputError(f"spec: random field {name!r} needs a list of choices or {{low, high[, log]}}")
        draws.append(row)
    return draws


def command_parser(command: str) -> argparse.ArgumentParser:
    """The argparse parser of `command` ("bb train"), found in the `attnlab` parser; one line if unknown."""
    from attnlab.cli import build_parser

    parser: argparse.ArgumentParser = build_parser()
    for word in command.split():
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            raise InputError(f"spec: unknown command {command!r}")
        parser = subs[0].choices[word]
    if parser.get_default("make_config") is None:
        raise InputError(f"spec: `attnlab {command}` cannot be swept (it builds no config)")
    return parser


def _option_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.option_strings and a.dest not in RESERVED}


def to_argv(fields: dict[str, Any], parser: argparse.ArgumentParser, command: str) -> list[str]:
    """Options for `fields` ({"lr": 1e-3, "no_mlp": [0]}); unknown fields and bad values are one-line errors."""
    actions = _option_actions(parser)
    argv: list[str] = []
    for name, value in fields.items():
        action = actions.get(name.replace("-", "_"))
        if action is None:
            raise InputError(f"spec: `attnlab {command}` has no field {name!r}; fields: {', '.join(sorted(actions))}")
        argv += _option(action, name, value)
    return argv


def _option(action: argparse.Action, name: str, value: Any) -> list[str]:
    flag = action.option_strings[-1]
    if action.nargs == 0:  # store_true / store_false
        check(isinstance(value, bool), f"spec: field {name!r} is a switch: give true or false, got {value!r}")
        return [flag] if value != action.default else []
    values = value if isinstance(value, list) else [value]
    check(
        all(isinstance(v, (str, int, float, bool)) for v in values), f"spec: field {name!r} has a bad value {value!r}"
    )
    for v in values:
        _check_type(action, name, v)
    if action.nargs in ("+", "*") or isinstance(action.nargs, int):
        return [flag, *map(str, values)]
    if isinstance(action, argparse._AppendAction):
        return [x for v in values for x in (flag, str(v))]
    check(not isinstance(value, list), f"spec: field {name!r} takes one value, got a list")
    return [flag, str(value)]


def _check_type(action: argparse.Action, name: str, value: Any) -> None:
    if action.choices is not None and value not in action.choices:
        raise InputError(f"spec: field {name!r} = {value!r}; choose from {', '.join(map(str, action.choices))}")
    kind = action.type
    if kind in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise InputError(f"spec: field {name!r} must be a number, got {value!r}")
    if kind is int and int(value) != value:
        raise InputError(f"spec: field {name!r} must be an integer, got {value!r}")


def build_trials(spec: SweepSpec, yes: bool = False) -> list[Trial]:
    """Every trial of `spec` with its config, validated before any work starts; duplicates are merged."""
    parser = command_parser(spec.command)
    check_trial_count(spec.count(), yes)  # counted before any trial is made
    rows = expand(spec)
    check(rows, "spec: the sweep has no trials")
    trials: dict[str, Trial] = {}
    for fields in rows:
        args = _parse(parser, to_argv(fields, parser, spec.command), spec.command)
        config = args.make_config(args)
        trials.setdefault(config_hash(config), Trial(config_hash(config), fields, config))
    return list(trials.values())


def _parse(parser: argparse.ArgumentParser, argv: list[str], command: str) -> argparse.Namespace:
    try:
        return parser.parse_args(argv)
    except SystemExit:
        raise InputError(f"spec: `attnlab {command} {' '.join(argv)}` is not a valid command line") from None
