"""Trials as Ray tasks: a local Ray instance (or an existing cluster), retries when a worker dies, a failing
trial recorded without stopping the sweep, and Ctrl-C leaving every finished trial intact.

A trial's folder `trials/<id>/` is complete when its `trial.json` says `"status": "done"` (written last,
atomically); a folder without it (a worker killed mid-run) is run again from scratch.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from attnlab.errors import InputError, check
from attnlab.runs import read_json, to_jsonable, write_json
from attnlab.sweep.config import SweepConfig
from attnlab.sweep.plan import Trial

TRIAL_FILE = "trial.json"


def trial_state(folder: Path) -> dict[str, Any] | None:
    """The trial's `trial.json` (status done or failed), or None when it never finished."""
    path = folder / TRIAL_FILE
    return read_json(path, "trial record") if path.is_file() else None


def run_trial(command: str, config: dict[str, Any], folder: str, threads: int) -> dict[str, Any]:
    """Run one trial (in a Ray worker): the command's run function into `folder`; returns its record.

    A folder left by a worker that died is replaced; an error in the trial is recorded, not raised.
    """
    from attnlab.core.clitools import threads as torch_threads
    from attnlab.core.registry import resolve
    from attnlab.runs.configs import config_from_dict

    path = Path(folder)
    mode = "overwrite" if (path / "manifest.json").is_file() else "new"
    try:
        config_cls, fn = resolve(command)
        with torch_threads(threads):
            result = fn(config_from_dict(config_cls, config), path, mode=mode)
        record = {"status": "done", "summary": to_jsonable(result.summary)}
    except Exception as exc:  # noqa: BLE001 - a failing trial is recorded and the sweep goes on
        record = {
            "status": "failed",
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(limit=5),
        }
    path.mkdir(parents=True, exist_ok=True)
    write_json(path / TRIAL_FILE, record)
    return record


def preflight(config: SweepConfig) -> None:
    """Refuse, before any folder or Ray process exists, a cluster address where nothing answers and trial
    resources a local instance could never give (Ray would wait for them forever); and, first, a machine without
    Ray (the `sweep` extra)."""
    import math
    import os

    from attnlab.core.parallel import check_address, require_ray

    require_ray("attnlab sweep")
    if config.address:
        check_address(config.address)
        return
    cpus = config.cpus or os.cpu_count() or 1
    check(
        config.threads_per_trial <= cpus,
        f"--threads-per-trial {config.threads_per_trial} is more than the {cpus} CPUs of this machine",
    )
    if config.gpus_per_trial > 0:
        import torch

        from attnlab.sweep.config import wants_gpu

        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
        why = " (its trials set device = cuda)" if wants_gpu(config.spec) else ""
        check(
            found >= math.ceil(config.gpus_per_trial),
            f"--gpus-per-trial {config.gpus_per_trial:g}{why}: this machine has {found} GPU(s) that Ray could give a "
            "trial, so no trial could start",
        )


def check_cluster_fits(ray: Any, config: SweepConfig) -> None:
    """Refuse when no node of the (started or joined) Ray cluster has one trial's CPUs and GPUs."""
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    cpus, gpus = config.threads_per_trial, config.gpus_per_trial
    if any(r.get("CPU", 0) >= cpus and r.get("GPU", 0) >= gpus for r in nodes):
        return
    have = ", ".join(f"{r.get('CPU', 0):g} CPUs/{r.get('GPU', 0):g} GPUs" for r in nodes) or "no live node"
    where = f"the cluster at {config.address}" if config.address else "the local Ray instance"
    raise InputError(
        f"no node of {where} has the {cpus} CPUs (--threads-per-trial) and {gpus:g} GPUs (--gpus-per-trial) "
        f"of one trial; nodes: {have}"
    )


def execute(
    trials: Iterable[Trial], config: SweepConfig, root: Path, on_done: Callable[[Trial, dict[str, Any]], None]
) -> None:
    """Run `trials` as Ray tasks; call `on_done(trial, record)` as each ends. Starts and stops Ray itself."""
    trials = list(trials)
    if not trials:
        return
    from attnlab.core.parallel import joined_ray, start_ray

    joined = joined_ray()  # inside a Ray task (a sweep that `attnlab reproduce --workers` runs): its instance
    own = joined is None
    ray = start_ray(config.address, config.cpus) if joined is None else joined
    try:
        check_cluster_fits(ray, config)
        task = ray.remote(run_trial).options(
            num_cpus=config.threads_per_trial,
            num_gpus=config.gpus_per_trial,
            max_retries=config.retries,
            retry_exceptions=False,
        )
        refs = {
            task.remote(
                config.spec.command, to_jsonable(t.config), str(root / "trials" / t.id), config.threads_per_trial
            ): t
            for t in trials
        }
        _collect(ray, refs, on_done, cancel_on_interrupt=bool(config.address) or not own)
    finally:
        if own:
            ray.shutdown()


def _collect(
    ray: Any,
    refs: dict[Any, Trial],
    on_done: Callable[[Trial, dict[str, Any]], None],
    *,
    cancel_on_interrupt: bool,
) -> None:
    """Wait for `refs` in the order they finish. On Ctrl-C / SIGTERM a cluster's pending tasks are cancelled;
    a local instance's are not: `ray.shutdown` (in `execute`) kills its workers, and `ray.cancel` racing a task
    that is just finishing aborts the driver inside Ray's core worker (Ray 2.60: "Tried to complete task that
    was not pending"), which would lose the exit code 130 and the finished trials' records."""
    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            trial = refs[done[0]]
            try:
                record = ray.get(done[0])
            except Exception as exc:  # noqa: BLE001 - the worker died more often than the retries allow
                record = {"status": "failed", "error": f"{type(exc).__name__}: worker lost ({exc})"[:500]}
            on_done(trial, record)
    except KeyboardInterrupt:
        for ref in pending if cancel_on_interrupt else ():
            ray.cancel(ref, force=True)
        raise
