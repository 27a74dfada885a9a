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

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnlab.core.targets import CLAIM
from attnlab.errors import InputError
from attnlab.reproduce import report
from attnlab.reproduce.config import ReproduceConfig
from attnlab.reproduce.execute import MARKS, clean, finished_mark, one_line, outcome, run_all
from attnlab.reproduce.experiments import (
    EXPERIMENTS,
    LAST,
    MINUTES,
    NEEDS,
    PAPER_SCALE,
    RESAMPLED,
    SIZES,
    runs_at,
    sized,
)
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


SEEDS = "seeds"  # folder/seeds/<s>/{runs,experiments}: the replicates of seed s (the first seed is folder/runs)


def seed_folder(folder: Path, seed: int) -> Path:
    """Where the replicate of `seed` runs: its runs/ and experiments/ (marks) as the first seed's."""
    return Path(folder) / SEEDS / str(seed)


def _run_fields(name: str, seed: int, size: dict) -> list:
    """The study runs of experiment `name` at `seed` as comparable tuples ("later" for a config built only once an
    earlier run of the experiment ran: it reads that run's folder, so it follows the runs that vary)."""
    runs = EXPERIMENTS[name].runs(seed, size, Path("runs"))  # type: ignore[misc]
    fields = [
        ("later",) if callable(r.config) else sorted((k, repr(v)) for k, v in dict(r.config).items()) for r in runs
    ]  # type: ignore[arg-type]
    return [(r.sub, r.command, f) for r, f in zip(runs, fields)]


def varies_with_seed(name: str, profile: str, device: str = "cpu") -> bool:
    """Whether another seed gives experiment `name` other study runs (its configs differ): only then are seeds
    replicates. A direct computation is one replicate, and so is an experiment that holds its own replicates
    (`RESAMPLED`); a run that reads another experiment's folder (`NEEDS`) varies when that experiment does (each
    seed's runs read their own seed's folder)."""
    if EXPERIMENTS[name].runs is None or name in RESAMPLED:
        return False
    if name in NEEDS and varies_with_seed(NEEDS[name], profile, device):
        return True
    size = sized(name, profile, device)
    return _run_fields(name, 0, size) != _run_fields(name, 1, size)


def replicated(targets: list[Target], names: list[str], config: ReproduceConfig) -> list[str]:
    """The experiments that run once per seed: those behind claim rows that vary with the seed, with the
    experiments they need (`NEEDS`); none with one seed."""
    if config.seeds <= 1:
        return []
    behind = {e for t in targets if t.group == CLAIM and t.measure is not None for e in t.needs if e in names}
    reps = {e for e in behind if varies_with_seed(e, config.profile, config.device)}
    reps |= {NEEDS[e] for e in reps if e in NEEDS}
    return [e for e in names if e in reps]


def run_replicates(reps: list[str], folder: Path, config: ReproduceConfig) -> tuple[dict[int, dict], dict]:
    """Run the experiments `reps` once for each seed after the first, into folder/seeds/<s>/runs/<name>; returns
    (seed -> name -> `Outcome`, "name (seed s)" -> log row)."""
    sizes = {n: sized(n, config.profile, config.device) for n in reps}
    replicas: dict[int, dict] = {}
    log: dict[str, dict] = {}
    for s in range(config.seed + 1, config.seed + config.seeds):
        root, marks = seed_folder(folder, s) / "runs", seed_folder(folder, s) / MARKS
        ended = run_all(reps, root, marks, s, sizes, config.workers, config.address, config.device)
        log |= {f"{n} (seed {s})": {"seconds": m["seconds"], "error": m["error"]} for n, m in ended.items()}
        replicas[s] = {n: outcome(n, root, m, s, sizes[n]) for n, m in ended.items() if m["error"] is None}
    return replicas, log


def _why_not(target: Target, log: dict, profile: str, device: str, pending: tuple[str, ...]) -> str | None:
    """Why the row has no numbers (an experiment not run at this profile, failed or not ended), else None."""
    missing = [n for n in target.needs if n not in runs_at(profile, device)]
    failed = [n for n in target.needs if n in log and log[n]["error"]]
    waiting = [n for n in target.needs if n in pending]
    if waiting and not missing:
        return f"not run yet: the {profile}-profile run has not finished {', '.join(waiting)}"
    if missing and all(n in SIZES[profile] for n in missing):
        return _paper_scale(missing, target)
    if missing:
        return f"the {profile} profile does not run {', '.join(missing)}" + _where(missing, target.study)
    if failed:
        return "; ".join(f"{n} failed: {log[n]['error']}" for n in failed)
    return None


def seeded_numbers(target: Target, done: dict, replicas: dict[int, dict]) -> dict[int, dict]:
    """seed -> the row's numbers measured on that seed's experiments (the first seed's where an experiment does not
    vary), for the seeds whose replicates of the row's experiments all ended; {} for a row with no replicate."""
    out: dict[int, dict] = {}
    for s, more in sorted(replicas.items()):
        runs = done | more
        if not any(n in more for n in target.needs) or not all(n in runs for n in target.needs):
            continue
        numbers, _ = _measure(target.measure, runs)  # type: ignore[arg-type]
        if numbers is not None:
            out[s] = numbers
    return out


def row_intervals(target: Target, numbers: dict, per_seed: dict[int, dict]) -> dict[str, Any]:
    """{key: Interval} of the judged and shown numbers: a t-interval over the seeds where the row has replicates
    (of each seed's number, or of its estimate from the row's own intervals where the row derives it, as R19's
    energy minus chance), else the row's own intervals (`Target.intervals`), else none."""
    from attnlab.core.intervals import seeds_interval

    keys = [c.key for c in (*target.checks, *target.shown)]
    if not per_seed:
        return _own_intervals(target, numbers)
    runs = [numbers, *per_seed.values()]
    derives = any(k not in numbers for k in keys)  # a number the row derives (R19 against chance), per seed
    derived = [_own_intervals(target, n) if derives else {} for n in runs]
    out = {}
    for k in keys:
        values = [n.get(k) if k in n else (d[k].estimate if k in d else None) for n, d in zip(runs, derived)]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            iv = seeds_interval([float(v) for v in values])  # type: ignore[arg-type]
            if iv is not None:
                out[k] = iv
    return out


def _own_intervals(target: Target, numbers: dict) -> dict[str, Any]:
    """The row's own intervals (`Target.intervals`) of one run's numbers, or none."""
    if target.intervals is None:
        return {}
    try:
        return dict(target.intervals(numbers))
    except (KeyError, TypeError, ValueError):  # a record without the numbers its intervals need
        return {}


def evaluate(target: Target, done: dict, log: dict, profile: str, device: str = "cpu",
             pending: tuple[str, ...] = (), replicas: dict[int, dict] | None = None) -> dict:  # fmt: skip
    """One table row: our numbers from the runs, their intervals (seeds or the row's own), the verdict from the
    checks, and why. `pending`: experiments of an unfinished run that have not ended yet (`table_so_far`);
    `replicas`: seed -> the Outcomes of the other seeds' replicates (`run_replicates`)."""
    numbers, reason, per_seed = None, target.not_run, {}
    if target.measure is not None:
        why_not = _why_not(target, log, profile, device, pending)
        if why_not is not None:
            reason = why_not
        else:
            numbers, reason = _measure(target.measure, done)
            if numbers is not None and target.group == CLAIM:
                per_seed = seeded_numbers(target, done, replicas or {})
    recorded = numbers is None and target.recorded is not None
    if recorded:
        numbers = target.recorded.as_dict()  # type: ignore[union-attr]
    return judged_row(target, numbers, reason, per_seed, recorded)


def judged_row(target: Target, numbers: dict | None, reason: str, per_seed: dict[int, dict],
               recorded: bool = False) -> dict:  # fmt: skip
    """The row of `target` from its numbers (None: not run, `reason` says why), its seeds' numbers and whether the
    numbers are a recorded hand run's."""
    intervals = row_intervals(target, numbers, per_seed) if numbers is not None else {}
    if target.group == CLAIM and numbers is not None:
        intervals |= exact_intervals(target, numbers, intervals)
    derived = [k for k in intervals if numbers is not None and k not in numbers]
    if numbers is not None:  # a number judged only through its interval (R19, B5 against chance) is shown too
        numbers = numbers | {k: intervals[k].estimate for k in derived}
    v, why = verdict(target.checks, numbers, reason, intervals, target.shown)
    if recorded:
        rec = target.recorded
        assert rec is not None
        why = f"recorded by hand, not by this run: {why}; measured in {rec.where}; command: `{rec.command}`"
    row = {
        "id": target.id, "study": target.study, "group": target.group, "spec": target.spec, "claim": target.claim,
        "threshold": target.threshold, "checks": [c.text() for c in target.checks],
        "shown": [c.text() for c in target.shown], "numbers": None if numbers is None else clean(numbers),
        "verdict": v, "why": why, "note": target.note, "recorded": recorded, "derived": derived,
        "runs": [f"runs/{n}" for n in target.needs] if v != NOT_RUN and not recorded else [],
        "figure": f"runs/{target.needs[0]}/{target.figure}"
        if v != NOT_RUN and target.figure and not recorded else None,
    }  # fmt: skip
    if target.group == CLAIM and numbers is not None:
        row |= replicate_fields(intervals, per_seed)
    return row


EXACT = "exact"  # the method of a judged number's point interval (`Check.exact`)


def exact_intervals(target: Target, numbers: dict, intervals: dict) -> dict[str, Any]:
    """The point intervals of a claim row's judged numbers that have no sampling error (`Check.exact`: a count of
    runs, a gate, a deterministic solve, a measured budget) and no interval of their own, the reason as the method."""
    from attnlab.core.intervals import Interval

    out = {}
    for c in target.checks:
        x = numbers.get(c.key)
        if c.exact and c.key not in intervals and isinstance(x, int | float) and math.isfinite(x):
            out[c.key] = Interval(float(x), float(x), float(x), 1, f"{EXACT} ({c.exact})")
    return out


def _sig(x: float) -> float:
    """`x` to 12 significant digits (not decimals: a bound of 1e-10 keeps an interval of 2e-16)."""
    return float(f"{x:.12g}")


def replicate_fields(intervals: dict, per_seed: dict[int, dict]) -> dict:
    """A claim row's `replicates`, `intervals` (key -> [low, high], 95 %) and `interval_method` (issue 39), from its
    sampled intervals; with none, one replicate and the method saying it is a single run. The point intervals of
    its exact numbers are in `intervals` too, and `exact` maps each to why it has no sampling error."""
    from attnlab.reproduce.verdict import SINGLE

    sampled = {k: iv for k, iv in intervals.items() if not iv.method.startswith(EXACT)}
    exact = {k: iv.method for k, iv in intervals.items() if k not in sampled}
    out: dict[str, Any] = {"replicates": 1, "intervals": {}, "interval_method": SINGLE}
    if sampled:
        out = {"replicates": max(iv.replicates for iv in sampled.values()),
               "interval_method": "; ".join(sorted({iv.method for iv in sampled.values()}))}  # fmt: skip
    out["intervals"] = {k: [_sig(iv.low), _sig(iv.high)] for k, iv in intervals.items()}
    if exact:  # judged numbers without sampling error (`Check.exact`): their point, and why
        out["exact"] = exact
    if per_seed:
        out["seeds_numbers"] = {str(s): clean(n) for s, n in per_seed.items()}
    return out


def judge_recorded(target: Target) -> tuple[str, str]:
    """(verdict, why) of a row this run does not measure, from the numbers of its recorded hand run: a known miss
    is missed, with where it was measured and the command."""
    assert target.recorded is not None
    row = judged_row(target, target.recorded.as_dict(), "", {}, recorded=True)
    return row["verdict"], row["why"]


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
            done, log = run_experiments([n for n in names if n not in LAST], run.path, config)
            replicas, more = run_replicates(replicated(targets, names, config), run.path, config)
            alone, alone_log = run_experiments([n for n in names if n in LAST], run.path, config)
            done, log = done | alone, log | alone_log
        except BaseException:  # Ctrl-C, SIGTERM or a failure: the session still records how long it ran
            if any((run.path / MARKS).glob("*.json")):  # an experiment ended: a full disk keeps the run
                run.resume_hint = "continue it with --resume"
            end_session(run.path, sessions, time.perf_counter() - t0, interrupted=True)
            raise
        rows = [evaluate(t, done, log, config.profile, config.device, (), replicas) for t in targets]
        log |= more
        sessions = end_session(run.path, sessions, time.perf_counter() - t0)
        record: dict[str, Any] = {
            "profile": config.profile,
            "studies": list(config.studies),
            "seed": config.seed,
            "seeds": config.seeds,
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


def rejudge_row(target: Target, row: dict) -> dict:
    """A saved measured row with the registry's current texts, group, checks and intervals applied to its saved
    numbers (and its seeds' numbers, where it has replicates)."""

    def num(d: dict) -> dict:
        return {k: float(v) if isinstance(v, str) and v in ("nan", "inf", "-inf") else v for k, v in d.items()}

    per_seed = {int(s): num(n) for s, n in row.get("seeds_numbers", {}).items()} if target.group == CLAIM else {}
    recorded = bool(row.get("recorded"))
    saved = {k: v for k, v in num(row["numbers"]).items() if k not in row.get("derived", ())}  # measured only
    new = judged_row(target, saved, "", per_seed, recorded)
    if recorded and target.recorded is None:  # the hand run's row was dropped: keep the saved words
        new["why"] = row["why"]
    return new | {"runs": row["runs"], "figure": row["figure"]}


def seed_plan(record: dict, seeds: int = 3) -> dict:
    """The cost of a `--seeds` run of `record`'s profile (issue 39 item 9): each experiment's one-seed minutes, the
    larger of this record's time and today's estimate (`MINUTES`: an experiment changed since, e.g. run at the
    cpu preset, costs more than it did), which were replicated, and the one-thread hours of the first seed's wave,
    of the other seeds and of the timed `LAST` experiments (alone, one at a time)."""
    config = ReproduceConfig(studies=tuple(record["studies"]), profile=record["profile"], seeds=seeds)
    targets, names = plan(config)
    reps = replicated(targets, names, config)
    took = {n: record["experiments"].get(n, {}).get("seconds", 0.0) / 60 for n in names}
    estimated = sorted(n for n in names if MINUTES.get(n, 0) > 2 * took[n])  # grown since (or not run then)
    minutes = {n: float(MINUTES[n]) if n in estimated else took[n] for n in names}

    def hours(ns: list[str]) -> float:
        return round(sum(minutes[n] for n in ns) / 60, 2)

    first, last = [n for n in names if n not in LAST], [n for n in names if n in LAST]
    return {"seeds": seeds, "replicated": {n: round(minutes[n], 1) for n in reps}, "estimated": estimated,
            "first_hours": hours(first), "added_hours": round((seeds - 1) * hours(reps), 2),
            "last_hours": hours(last)}  # fmt: skip


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
        rows.append(evaluate(t, done, log, config.profile) if fresh or row is None else rejudge_row(t, row))
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
    replicas = ended_replicas(folder, config, replicated(targets, names, config))
    rows = [evaluate(t, done, log, config.profile, config.device, pending, replicas) for t in targets]
    sessions = read_json(folder / SESSIONS, "reproduce sessions") if (folder / SESSIONS).is_file() else []
    ended_at = sessions[-1]["ended"] if sessions and not pending else None  # a finished run: when it ended
    record: dict[str, Any] = {
        "profile": config.profile, "studies": list(config.studies), "seed": config.seed, "seeds": config.seeds,
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


def ended_replicas(folder: Path, config: ReproduceConfig, reps: list[str]) -> dict[int, dict]:
    """seed -> name -> `Outcome` of the other seeds' replicates that have ended without error (nothing runs)."""
    from attnlab.runs import read_json

    out: dict[int, dict] = {}
    for s in range(config.seed + 1, config.seed + config.seeds):
        marks, root = seed_folder(folder, s) / MARKS, seed_folder(folder, s) / "runs"
        out[s] = {}
        for n in reps:
            mark = read_json(marks / f"{n}.json", "experiment mark") if (marks / f"{n}.json").is_file() else None
            if mark is not None and mark.get("error") is None:
                out[s][n] = outcome(n, root, mark, s, sized(n, config.profile, config.device))
    return out


def check_reproduce_folder(folder: Path) -> None:
    """One line unless `folder` is a reproduce run folder (its config.json names the command)."""
    from attnlab.runs import read_json

    if not (folder / "config.json").is_file() or not (folder / "manifest.json").is_file():
        raise InputError(f"{folder} is not an attnlab run folder (no config.json and manifest.json)")
    command = read_json(folder / "manifest.json", "run manifest").get("command")
    if command != "reproduce":
        raise InputError(f"{folder} is a `{command}` run, not a `reproduce` run")
