"""`attnlab reproduce` as a function: run the study runs behind the targets, then compute every verdict in code.

`reproduce(ReproduceConfig(...), out)` writes into `out`:
  runs/<experiment>/      the study runs (each a normal attnlab run folder with its own report.html; `execute.py`)
  experiments/            one mark per ended experiment (what `mode="resume"` keeps)
  reproduction.json       one row per target: id, study, claim, spec threshold, our numbers, verdict, why, links
  reproduction.md         the same table in Markdown (committed as docs/reproduction.md: `config.docs`)
  report.html             the same table in HTML
An experiment that fails is recorded (its targets become "not run" with the error); the others still run.

`update(folder)` brings a saved reproduce folder up to date with the registry without re-running it: the study runs
of its profile that it lacks (targets added since) are run into folder/runs/, their rows and every not-run row are
evaluated afresh, the other rows keep their numbers (judged again by the current checks); then reproduction.json/.md
and report.html are rewritten.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnlab.errors import InputError
from attnlab.reproduce import report
from attnlab.reproduce.config import ReproduceConfig
from attnlab.reproduce.execute import MARKS, clean, finished_mark, one_line, outcome, run_all
from attnlab.reproduce.experiments import EXPERIMENTS, NEEDS, PAPER_SCALE, SIZES, runs_at, sized
from attnlab.reproduce.targets import TARGETS, Target
from attnlab.reproduce.verdict import NOT_RUN, verdict
from attnlab.runs import RunResult, open_run


def plan(config: ReproduceConfig) -> tuple[list[Target], list[str]]:
    """(the targets of the chosen studies, the experiments to run for them at this profile, in run order)."""
    targets = [t for t in TARGETS if t.study in config.studies and (not config.targets or t.id in config.targets)]
    unknown = sorted(set(config.targets) - {t.id for t in targets})
    if unknown:
        raise InputError(f"--targets: no target {', '.join(unknown)} in the studies {', '.join(config.studies)}")
    sizes = runs_at(config.profile, config.device)
    wanted = {e for t in targets if t.needs and all(n in sizes for n in t.needs) for e in t.needs}
    wanted |= {NEEDS[e] for e in wanted if e in NEEDS}
    return targets, [e for e in EXPERIMENTS if e in wanted]


def run_experiments(names: list[str], folder: Path, config: ReproduceConfig) -> tuple[dict, dict]:
    """Run (or, resuming, finish) the experiments into folder/runs/<name>; returns (name -> `Outcome` of those
    that ran, name -> log row with seconds and error)."""
    sizes = {n: sized(n, config.profile, config.device) for n in names}
    root, marks = folder / "runs", folder / MARKS
    ended = run_all(names, root, marks, config.seed, sizes, config.workers, config.address, config.device)
    log = {n: {"seconds": m["seconds"], "error": m["error"]} for n, m in ended.items()}
    done = {n: outcome(n, root, m, config.seed, sizes[n]) for n, m in ended.items() if m["error"] is None}
    return done, log


def evaluate(target: Target, done: dict, log: dict, profile: str, device: str = "cpu",
             pending: tuple[str, ...] = ()) -> dict:  # fmt: skip
    """One table row: our numbers from the runs, the verdict from the checks, and why. `pending`: experiments of
    an unfinished run that have not ended yet (`table_so_far`)."""
    numbers, reason = None, target.not_run
    if target.measure is not None:
        missing = [n for n in target.needs if n not in runs_at(profile, device)]
        failed = [n for n in target.needs if n in log and log[n]["error"]]
        waiting = [n for n in target.needs if n in pending]
        if waiting and not missing:
            reason = f"not run yet: the {profile}-profile run has not finished {', '.join(waiting)}"
        elif missing and all(n in SIZES[profile] for n in missing):
            reason = _paper_scale(missing, target)
        elif missing:
            reason = f"the {profile} profile does not run {', '.join(missing)}" + _where(missing, target.study)
        elif failed:
            reason = "; ".join(f"{n} failed: {log[n]['error']}" for n in failed)
        else:
            numbers, reason = _measure(target.measure, done)
    v, why = verdict(target.checks, numbers, reason)
    recorded = numbers is None and target.recorded is not None
    if recorded:
        numbers, (v, why) = target.recorded.as_dict(), judge_recorded(target)  # type: ignore[union-attr]
    return {
        "id": target.id,
        "study": target.study,
        "spec": target.spec,
        "claim": target.claim,
        "threshold": target.threshold,
        "checks": [c.text() for c in target.checks],
        "numbers": None if numbers is None else clean(numbers),
        "verdict": v,
        "why": why,
        "note": target.note,
        "recorded": recorded,
        "runs": [f"runs/{n}" for n in target.needs] if v != NOT_RUN and not recorded else [],
        "figure": f"runs/{target.needs[0]}/{target.figure}"
        if v != NOT_RUN and target.figure and not recorded
        else None,
    }


def judge_recorded(target: Target) -> tuple[str, str]:
    """(verdict, why) of a row this run does not measure, from the numbers of its recorded hand run: a known miss
    is missed, with where it was measured and the command."""
    rec = target.recorded
    assert rec is not None
    v, why = verdict(target.checks, rec.as_dict())
    return v, f"recorded by hand, not by this run: {why}; measured in {rec.where}; command: `{rec.command}`"


def _paper_scale(names: list[str], target: Target) -> str:
    """Why a row of a paper-scale experiment is not run on the cpu, with the command that runs it on a GPU."""
    what = "; ".join(PAPER_SCALE[n] for n in names)
    return (
        f"not run: paper scale, GPU ({what}): `attnlab reproduce {target.study} --profile full --device cuda "
        f"--targets {target.id}`"
    )


def _where(names: list[str], study: str) -> str:
    """Where `names` run: " (full profile: `attnlab reproduce <study> --profile full`)", the smallest profile that
    runs them all, or "" if none does."""
    at = next((p for p in SIZES if all(n in SIZES[p] for n in names)), None)
    return f" ({at} profile: `attnlab reproduce {study} --profile {at}`)" if at else ""


def _measure(fn: Callable[[dict], dict], done: dict) -> tuple[dict | None, str]:
    try:
        return fn(done), ""
    except Exception as exc:  # noqa: BLE001 - a broken measure is reported as such in its row
        return None, f"measure failed: {one_line(exc)}"


def reproduce(config: ReproduceConfig, out: str | Path | None = None, *, mode: str = "new") -> RunResult:
    """Run the targets of `config.studies` at `config.profile` into `out`; tables: `targets` (one row each).

    mode "resume" finishes an interrupted reproduce run in `out` (same config; `docs`, `workers` and `address` may
    differ): its finished study runs are kept, the rest run, and the table is the one an uninterrupted run writes.
    With `config.docs`, the table and figures are also exported there (`report.export_docs`)."""
    import pandas as pd

    targets, names = plan(config)
    if config.docs is not None:
        report.check_docs_folder(Path(config.docs))
    with open_run(out, "reproduce", config, mode=mode, seed=config.seed) as run:
        if mode == "resume":
            _check_resume(run.read_config(), config)
        t0 = time.perf_counter()
        sessions = start_session(run.path, config)
        try:
            done, log = run_experiments(names, run.path, config)
        except BaseException:  # Ctrl-C, SIGTERM or a failure: the session still records how long it ran
            if any((run.path / MARKS).glob("*.json")):  # an experiment ended: a full disk keeps the run
                run.resume_hint = "continue it with --resume"
            end_session(run.path, sessions, time.perf_counter() - t0, interrupted=True)
            raise
        rows = [evaluate(t, done, log, config.profile, config.device) for t in targets]
        sessions = end_session(run.path, sessions, time.perf_counter() - t0)
        record: dict[str, Any] = {
            "profile": config.profile,
            "studies": list(config.studies),
            "seconds": round(sum(v["seconds"] for v in log.values()), 1),
            "wall_seconds": round(sum(s["wall_seconds"] or 0.0 for s in sessions), 1),
            "finished": sessions[-1]["ended"],
            "machine": machine(),
            "sessions": sessions,
            "experiments": log,
            "counts": report.counts(rows),
            "rows": rows,
        }
        run.write_json("reproduction.json", record)
        report.write_all(run.path)
    if config.docs is not None:
        report.export_docs(run.path, Path(config.docs))
    table = pd.DataFrame([{k: r[k] for k in ("id", "study", "verdict", "why")} for r in rows])
    return RunResult(run.path, config, record["counts"], {"targets": table})


SESSIONS = "sessions.json"


def start_session(folder: Path, config: ReproduceConfig) -> list[dict]:
    """Note in folder/sessions.json that a session (the first run or a `--resume`) starts now; returns the list.
    One that Ctrl-C or SIGTERM stopped records its end (`interrupted`); one that kill -9 ended keeps `ended` None.
    The table's wall time is the sum over the sessions that recorded an end."""
    import datetime as dt

    import torch

    from attnlab.runs import read_json, write_json

    path = folder / SESSIONS
    sessions = read_json(path, "reproduce sessions") if path.is_file() else []
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    sessions.append({"started": now, "ended": None, "wall_seconds": None, "workers": config.workers,
                     "address": config.address, "threads": torch.get_num_threads()})  # fmt: skip
    write_json(path, sessions)
    return sessions


def end_session(folder: Path, sessions: list[dict], seconds: float, interrupted: bool = False) -> list[dict]:
    """Close the last session of folder/sessions.json with its wall seconds (`interrupted`: stopped before the
    table); returns the list."""
    import datetime as dt

    from attnlab.runs import write_json

    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    end = {"ended": now, "wall_seconds": round(seconds, 1)} | ({"interrupted": True} if interrupted else {})
    sessions = [*sessions[:-1], sessions[-1] | end]
    write_json(folder / SESSIONS, sessions)
    return sessions


def machine() -> str:
    """The machine in words: cpu model, logical cores, memory, torch version (and the GPU when one is present)."""
    import os
    import platform

    import torch

    model = platform.processor() or platform.machine()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        model = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), model)
    except OSError:
        pass
    try:
        mem = f", {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        mem = ""
    gpu = f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""
    return f"{model}, {os.cpu_count()} logical cores{mem}{gpu}; torch {torch.__version__}"


def _check_resume(saved: dict, config: ReproduceConfig) -> None:
    """Refuse a --resume whose settings differ from the saved run's in anything but where results go."""
    from attnlab.runs.configs import config_to_dict

    now = config_to_dict(config)
    keys = sorted(k for k in set(saved) | set(now) if k not in config.PLACEMENT and saved.get(k) != now.get(k))
    if keys:
        raise InputError(f"--resume: {', '.join(keys)} differ from the saved run's; resume with the same settings")


def _rejudge(target: Target, row: dict) -> dict:
    """A saved measured row with the registry's current texts and checks applied to its saved numbers."""
    nums = {k: float(v) if isinstance(v, str) and v in ("nan", "inf", "-inf") else v for k, v in row["numbers"].items()}
    v, why = verdict(target.checks, nums)
    texts = {"claim": target.claim, "threshold": target.threshold, "note": target.note}
    return row | texts | {"checks": [c.text() for c in target.checks], "verdict": v, "why": why}


def _mark_saved(marks: Path, experiments: dict) -> None:
    """Marks for the study runs a folder saved before reproduce wrote marks (their numbers are read back from the
    folders); a direct computation, whose numbers were not saved then, is left to run again."""
    from attnlab.runs import write_json

    for name, entry in experiments.items():
        path = marks / f"{name}.json"
        if entry.get("error") is None and not path.is_file() and EXPERIMENTS[name].compute is None:
            write_json(path, {"seconds": entry["seconds"], "error": None, "run_seconds": {}, "numbers": None})


def update(folder: str | Path, seed: int = 0) -> dict:
    """Update the saved reproduce run in `folder` (see the module doc); returns the new record. Its `updated` lists
    the study runs added (with their seconds in `experiments`)."""
    from attnlab.runs import read_json, write_json

    folder = Path(folder)
    record = read_json(folder / "reproduction.json", "reproduction.json")
    config = ReproduceConfig(studies=tuple(record["studies"]), profile=record["profile"], seed=seed)
    targets, names = plan(config)
    _mark_saved(folder / MARKS, record["experiments"])
    new = [n for n in names if finished_mark(folder / MARKS, n) is None]
    done, log = run_experiments(names, folder, config)
    log = {n: v for n, v in log.items() if n in new}
    old = {(r["study"], r["id"]): r for r in record["rows"]}
    rows: list[dict] = []
    for t in targets:
        row = old.get((t.study, t.id))
        fresh = row is None or row["numbers"] is None or t.measure is None or bool(row.get("recorded"))
        fresh = fresh or any(n in new for n in t.needs)
        rows.append(evaluate(t, done, log, config.profile) if fresh or row is None else _rejudge(t, row))
    record |= {"experiments": record["experiments"] | log, "rows": rows, "counts": report.counts(rows)}
    record["seconds"] = round(record["seconds"] + sum(v["seconds"] for v in log.values()), 1)
    record["updated"] = sorted(set(record.get("updated", [])) | set(new))
    write_json(folder / "reproduction.json", record)
    report.write_all(folder)
    return record


RUNNERS: dict[str, tuple[type, Callable[..., RunResult]]] = {"reproduce": (ReproduceConfig, reproduce)}


def table_so_far(folder: str | Path, docs: str | Path | None = None) -> dict:
    """The table of the reproduce run in `folder` from the experiments that have ended so far, while it runs or
    after a kill (nothing runs, and the run folder is not written): a row whose experiments have not ended reads
    "not run yet". Returns the record; with `docs`, exported there as `reproduce --docs` does (marked partial while
    an experiment has not ended). On a finished run it is the table of the current targets' code over the saved
    experiments (a measure or threshold changed since), dated by the run's end."""
    import datetime as dt

    from attnlab.runs import read_json
    from attnlab.runs.configs import config_from_dict

    folder = Path(folder)
    check_reproduce_folder(folder)
    config = config_from_dict(ReproduceConfig, read_json(folder / "config.json", "reproduce config"))
    targets, names = plan(config)
    marks, root = folder / MARKS, folder / "runs"
    ended = {n: read_json(marks / f"{n}.json", "experiment mark") for n in names if (marks / f"{n}.json").is_file()}
    log = {n: {"seconds": m["seconds"], "error": m["error"]} for n, m in ended.items()}
    sizes = {n: sized(n, config.profile, config.device) for n in names}
    done = {n: outcome(n, root, m, config.seed, sizes[n]) for n, m in ended.items() if m["error"] is None}
    pending = tuple(n for n in names if n not in ended)
    rows = [evaluate(t, done, log, config.profile, config.device, pending) for t in targets]
    sessions = read_json(folder / SESSIONS, "reproduce sessions") if (folder / SESSIONS).is_file() else []
    ended_at = sessions[-1]["ended"] if sessions and not pending else None  # a finished run: when it ended
    record: dict[str, Any] = {
        "profile": config.profile, "studies": list(config.studies),
        "seconds": round(sum(v["seconds"] for v in log.values()), 1),
        "wall_seconds": round(sum(x["wall_seconds"] or 0.0 for x in sessions), 1),
        "finished": ended_at or dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "machine": machine(),
        "sessions": sessions, "experiments": log, "partial": bool(pending), "pending": list(pending),
        "tabled": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "started": read_json(folder / "manifest.json", "run manifest").get("created"),
        "counts": report.counts(rows), "rows": rows,
    }  # fmt: skip
    if docs is not None:
        report.check_docs_folder(Path(docs))
        report.export_docs(folder, Path(docs), record)
    return record


def check_reproduce_folder(folder: Path) -> None:
    """One line unless `folder` is a reproduce run folder (its config.json names the command)."""
    from attnlab.runs import read_json

    if not (folder / "config.json").is_file() or not (folder / "manifest.json").is_file():
        raise InputError(f"{folder} is not an attnlab run folder (no config.json and manifest.json)")
    command = read_json(folder / "manifest.json", "run manifest").get("command")
    if command != "reproduce":
        raise InputError(f"{folder} is a `{command}` run, not a `reproduce` run")
