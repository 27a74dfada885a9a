"""Running the experiments of `experiments.EXPERIMENTS`: each study run through `attnlab.core.registry.resolve`, in this
process or as Ray tasks (`attnlab.core.parallel`), resumable after a kill.

Layout inside a reproduce run folder:
  runs/<experiment>/[<sub>/]      each study run (a normal attnlab run folder: `attnlab rerun` redoes it)
  experiments/<experiment>.json   written once the experiment has ended: seconds per run, error, and the numbers
                                  of a direct computation
  experiments/<experiment>/<sub>.json   the seconds of one finished study run (kept on resume)
Resuming keeps every study run whose folder finished with the same config and runs the rest afresh; the
numbers are always read back from the folders (`attnlab.load_run`), so a resumed table equals an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.errors import AttnlabError
from attnlab.reproduce.experiments import EXPERIMENTS, LAST, NEEDS, Run, longest_first
from attnlab.runs import RunResult, read_json, write_json

MARKS = "experiments"


@dataclass(frozen=True)
class Outcome:
    """One finished experiment as the measures see it: its study runs read back from their folders (sub -> run;
    "" for an experiment of one run), the seconds of each, and the numbers of a direct computation."""

    runs: dict[str, RunResult] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    numbers: dict[str, Any] | None = None
    peak_rss_mb: float | None = None  # of the process that ran it (sequentially: the largest so far)


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message`."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def clean(numbers: dict) -> dict:
    """JSON-safe numbers: floats (NaN/inf kept as strings), ints, bools, strings and None as they are."""
    out: dict[str, Any] = {}
    for k, v in numbers.items():
        if isinstance(v, bool | int | str) or v is None:
            out[k] = v
        else:
            x = float(v)
            out[k] = x if math.isfinite(x) else str(x)
    return out


def _slug(sub: str) -> str:
    return sub.replace("/", "__") or "_"


def _run_path(folder: Path, run: Run) -> Path:
    return folder / run.sub if run.sub else folder


def _kept(path: Path, mark: Path, config: Any) -> float | None:
    """The seconds of a study run in `path` that finished with `config` (None: run it again)."""
    from attnlab.runs import config_hash, run_status

    if not mark.is_file() or run_status(path) != "finished":
        return None
    manifest = read_json(path / "manifest.json", "run manifest")
    return float(read_json(mark, "run mark")["seconds"]) if manifest.get("config_hash") == config_hash(config) else None


def _resumable(path: Path, config: Any) -> bool:
    """Whether `path` holds an interrupted run of `config` with a checkpoint to go on from (a `bb train` or
    `series train` run: `checkpoints/step_*`), so resuming it keeps its finished steps (bit-identical resume)."""
    from attnlab.runs import config_hash, run_status

    ckpts = path / "checkpoints"
    if not ckpts.is_dir() or not any(ckpts.glob("step_*")) or run_status(path) != "interrupted":
        return False
    manifest = read_json(path / "manifest.json", "run manifest")
    return manifest.get("config_hash") == config_hash(config)


def on_device(config: Any, device: str) -> Any:
    """`config` computing on `device`, where its command takes a device and this run of it can use one (no
    `CPU_ONLY` reason, such as `paths sample --outputs > 1`) and its experiment did not set one itself."""
    fields = getattr(config, "__dataclass_fields__", {})
    if device == "cpu" or "device" not in fields or config.device != "cpu" or getattr(config, "CPU_ONLY", None):
        return config
    return dataclasses.replace(config, device=device)


def execute(run: Run, folder: Path, marks: Path, device: str = "cpu") -> float:
    """Run one study run into folder/<sub> through the registry (kept if it already finished with this config),
    on `device` where it takes one (`on_device`); returns its seconds and notes them in marks/<sub>.json."""
    from attnlab.core.registry import resolve
    from attnlab.runs.configs import config_from_dict

    config_cls, fn = resolve(run.command)
    fields = run.config() if callable(run.config) else run.config
    config: Any = on_device(config_from_dict(config_cls, dict(fields)), device)
    path, mark = _run_path(folder, run), marks / f"{_slug(run.sub)}.json"
    kept = _kept(path, mark, config)
    if kept is not None:
        return kept
    quiet = {"progress": False} if "progress" in inspect.signature(fn).parameters else {}
    t0 = time.perf_counter()
    if _resumable(path, config):  # a training run a kill interrupted: on from its newest checkpoint
        fn(config, path, mode="resume", **quiet)
    else:
        if path.exists():  # an attempt a kill interrupted, or another config: ours to replace (inside runs/)
            shutil.rmtree(path)
        fn(config, path, mode="new", **quiet)
    seconds = round(time.perf_counter() - t0, 2)
    write_json(mark, {"seconds": seconds})
    return seconds


def run_experiment(name: str, root: Path, marks: Path, seed: int, size: dict, device: str = "cpu") -> dict:
    """Run experiment `name` into root/<name> and write marks/<name>.json; returns that mark (seconds, error, and
    the numbers of a direct computation). A failure is recorded; Ctrl-C / SIGTERM (exit code 130) ends reproduce.
    Its study runs compute on `device` where they can (`on_device`); its direct computations on the cpu."""
    exp, folder = EXPERIMENTS[name], Path(root) / name
    t0 = time.perf_counter()
    seconds: dict[str, float] = {}
    numbers, error = None, None
    try:
        if exp.compute is not None:
            numbers = clean(exp.compute(seed, size))
        else:
            for run in exp.runs(seed, size, Path(root)):  # type: ignore[misc]
                seconds[run.sub] = execute(run, folder, Path(marks) / name, device)
            if exp.figure is not None:
                exp.figure(folder)
    except Exception as exc:  # noqa: BLE001 - one failed study run must not lose the others' verdicts
        if isinstance(exc, AttnlabError) and exc.exit_code == 130:
            raise  # e.g. bb training's checkpoint-and-exit on SIGTERM
        error = one_line(exc)
    total = round(sum(seconds.values()) if exp.compute is None else time.perf_counter() - t0, 2)
    mark = {"seconds": total, "error": error, "run_seconds": seconds, "numbers": numbers, "peak_rss_mb": _peak_rss()}
    write_json(Path(marks) / f"{name}.json", mark)
    return mark


def _peak_rss() -> float | None:
    """This process's peak resident set size in MB (None where `resource` is missing)."""
    try:
        import resource
    except ImportError:
        return None
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux


def finished_mark(marks: Path, name: str) -> dict | None:
    """The mark of an experiment that ended without error (None: run it, again or for the first time)."""
    path = Path(marks) / f"{name}.json"
    mark = read_json(path, "experiment mark") if path.is_file() else None
    return mark if mark is not None and mark.get("error") is None else None


def run_all(names: list[str], root: Path, marks: Path, seed: int, sizes: dict, workers: int = 1,
            address: str | None = None, device: str = "cpu") -> dict[str, dict]:  # fmt: skip
    """Run the experiments not yet finished (in this process, or as Ray tasks with `workers` > 1 or an
    `address`: those that need another in a second wave; the `LAST` ones in a third, one at a time in this process,
    since they time themselves); returns name -> mark, in `names` order. `device`: what every study run that takes
    one computes on (`execute`)."""
    marks_of = {n: m for n in names if (m := finished_mark(marks, n)) is not None}
    first = [n for n in names if n not in NEEDS and n not in LAST]
    waves = (first, [n for n in names if n in NEEDS], [n for n in names if n in LAST])  # LAST: hours, after all
    for wave in waves:
        todo = longest_first([n for n in wave if n not in marks_of])
        failed = {n for n in todo if n in NEEDS and NEEDS[n] not in marks_of}
        for n in failed:
            marks_of[n] = {"seconds": 0.0, "error": f"needs {NEEDS[n]}, which failed", "run_seconds": {}}
        items = [(n, root, marks, seed, sizes[n], device) for n in todo if n not in failed]
        alone = wave is waves[-1]
        for (n, *_), mark in zip(items, _map(items, 1 if alone else workers, None if alone else address)):
            marks_of[n] = mark
    return {n: marks_of[n] for n in names}


def _map(items: list[tuple], workers: int, address: str | None) -> list[dict]:
    if not items:
        return []
    if workers <= 1 and not address:
        return [run_experiment(*item) for item in items]
    from attnlab.core.parallel import parallel_map

    return parallel_map(run_experiment, items, workers=workers, address=address)


def outcome(name: str, root: Path, mark: dict, seed: int, size: dict) -> Outcome:
    """A finished experiment read back from its folders (`attnlab.load_run`) and its mark."""
    from attnlab.runs.results import load_run

    exp = EXPERIMENTS[name]
    if exp.compute is not None:
        numbers = {k: float(v) if v in ("nan", "inf", "-inf") else v for k, v in (mark.get("numbers") or {}).items()}
        return Outcome(numbers=numbers, seconds={"": mark["seconds"]}, peak_rss_mb=mark.get("peak_rss_mb"))
    runs = {r.sub: load_run(_run_path(Path(root) / name, r)) for r in exp.runs(seed, size, Path(root))}  # type: ignore[misc]
    return Outcome(runs=runs, seconds=dict(mark.get("run_seconds", {})), peak_rss_mb=mark.get("peak_rss_mb"))
