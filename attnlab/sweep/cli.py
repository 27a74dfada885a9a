"""`attnlab sweep SPEC.toml --out DIR`: argparse <-> SweepConfig."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from attnlab.core.clitools import loopback_ray, positive_int, run_mode
from attnlab.errors import AttnlabError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a grid, list or random draws of any command's configs on Ray",
        description="Runs each trial of SPEC (TOML: command, [base], [grid] / [[list]] / [random]) "
        "as a Ray task into DIR/trials/<id>/ and writes sweep.csv, figures and "
        "report.html. Rerunning the same spec into DIR skips finished trials.",
    )
    p.add_argument("spec", type=Path, help="the sweep spec (TOML)")
    p.add_argument("--out", type=Path, default=None, help="sweep folder (default runs/sweep-<time>)")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier run in --out")
    p.add_argument("--address", default=None, help="join this Ray cluster (default $RAY_ADDRESS, else a local one)")
    p.add_argument("--cpus", type=positive_int, default=None, help="CPUs of the local Ray instance (default all)")
    p.add_argument("--threads-per-trial", type=positive_int, default=1, help="torch threads (= CPUs) per trial")
    p.add_argument("--gpus-per-trial", type=float, default=0.0, help="GPUs per trial (default 0)")
    p.add_argument("--retries", type=int, default=2, help="retries of a trial whose worker died (default 2)")
    p.add_argument("--yes", action="store_true", help="run even when the spec makes many trials")
    p.add_argument(
        "--log",
        action="append",
        choices=("tensorboard", "mlflow"),
        default=None,
        help="also log each trial's fields and final metrics for TensorBoard or MLflow (in DIR); repeatable",
    )
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(args: argparse.Namespace) -> int:
    import os

    from attnlab.sweep.config import SweepConfig, load_spec
    from attnlab.sweep.run import sweep

    address = args.address or os.environ.get("RAY_ADDRESS") or None
    config = SweepConfig(
        spec=load_spec(args.spec),
        address=address,
        cpus=args.cpus,
        threads_per_trial=args.threads_per_trial,
        gpus_per_trial=args.gpus_per_trial,
        retries=args.retries,
        yes=args.yes,
    )
    with loopback_ray(address is None):
        result = sweep(config, args.out, mode=run_mode(args), log=tuple(args.log or ()))
    s = result.summary
    print(f"{s['trials']} trials: {s['done']} done, {s['failed']} failed ({s['ran']} run now, the rest were done)")
    print(f"run folder: {result.path}")
    if s["failed_trials"]:
        raise failed_trials_error(result.path, s["failed_trials"], result.tables["trials"])
    return 0


def failed_trials_error(root: Path, failed: list[str], table: Any) -> AttnlabError:
    """One line naming the first failed trial, its error and the file that holds its traceback."""
    first = failed[0]
    rows = table.loc[table["trial"] == first]
    error = str(rows["error"].iloc[0]) if "error" in rows else "unknown error"
    error = (error.strip().splitlines() or ["unknown error"])[0][:300]
    more = f" (and {len(failed) - 1} more: see sweep.csv)" if len(failed) > 1 else ""
    return AttnlabError(
        f"{len(failed)} of {len(table)} trials failed; trial {first}: {error}; "
        f"traceback in {root / 'trials' / first / 'trial.json'}{more}"
    )
