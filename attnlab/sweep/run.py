"""`attnlab sweep`: run a spec's trials on Ray into `DIR/trials/<id>/` and aggregate them (issue 10).

Rerunning a spec of the same command into the same folder skips finished trials (by id, the hash of the trial's
config) and runs the rest: a spec grown by a value or a seed runs only the new trials, with no `--overwrite`. The
folder's config.json then holds the new spec; trials of the earlier spec that the new one lacks stay on disk
(listed in trials.json as `other_ids`) and out of sweep.csv. A spec of another command is refused unless
`--overwrite`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from attnlab.core.tracking import Tracker, check_trackers
from attnlab.runs import RunResult, config_hash, open_run, read_json, write_json, write_text
from attnlab.sweep.config import SweepConfig
from attnlab.sweep.engine import TRIAL_FILE, execute, preflight, trial_state
from attnlab.sweep.plan import Trial, build_trials

COMMAND = "sweep"


def _mode_for(out: Path | None, config: SweepConfig, mode: str) -> str:
    """ "resume" when `out` already holds a sweep of a spec of the same command (the same spec, or one grown by
    values or seeds: rerunning it adds the missing trials)."""
    if mode != "new" or out is None or not (Path(out) / "manifest.json").is_file():
        return mode
    manifest = read_json(Path(out) / "manifest.json", "run manifest")
    if manifest.get("command") != COMMAND:
        return mode
    if manifest.get("spec_hash") == config_hash(config.spec):
        return "resume"
    saved = read_json(Path(out) / "config.json", "run config")
    spec = saved.get("spec") if isinstance(saved, dict) else None
    same_command = isinstance(spec, dict) and spec.get("command") == config.spec.command
    return "resume" if same_command else mode


def sweep(
    config: SweepConfig, out: str | Path | None = None, *, mode: str = "new", log: tuple[str, ...] = ()
) -> RunResult:
    """Run every trial of `config.spec` not yet finished in `out`; write sweep.csv, figures and report.html.
    `log`: trackers ("tensorboard", "mlflow") that get each trial run now: its fields and final metrics."""
    log = check_trackers(log, "--log")
    trials = build_trials(config.spec, config.yes)  # every trial validated before any work starts
    preflight(config)
    out = Path(out) if out is not None else None
    with open_run(out, COMMAND, config, mode=_mode_for(out, config, mode)) as run:
        manifest = run.read_manifest()
        if manifest.get("spec_hash") != config_hash(config.spec):  # a new or grown spec: the folder now holds it
            run.write_config(config)
            write_json(run.path / "manifest.json", {**manifest, "spec_hash": config_hash(config.spec)})
        todo = [t for t in trials if (trial_state(run.path / "trials" / t.id) or {}).get("status") != "done"]
        bar = tqdm(total=len(trials), initial=len(trials) - len(todo), desc="sweep", unit="trial")

        def on_done(trial: Trial, record: dict[str, Any]) -> None:
            folder = run.path / "trials" / trial.id
            if trial_state(folder) is None:  # the worker died before it could record anything
                write_json(folder / TRIAL_FILE, record)
            run.resume_hint = "run the same sweep into it again to continue it"
            bar.update(1)

        try:
            execute(todo, config, run.path, on_done)
        finally:
            bar.close()
        table = aggregate(trials, run.path)
        log_trials(todo, run.path, log)
        from attnlab.sweep.figures import sweep_figures
        from attnlab.sweep.report import write_report

        save_view(run.path, table, config.spec.command, trials)
        sweep_figures(run.path)
        write_report(run)
    return RunResult(run.path, config, summary={**_summary(table), "ran": len(todo)}, tables={"trials": table})


def aggregate(trials: list[Trial], root: Path) -> Any:
    """`sweep.csv`: one row per trial (id, status, its fields, its final summary metrics)."""
    import pandas as pd

    rows = []
    for t in trials:
        record = trial_state(root / "trials" / t.id) or {"status": "not run"}
        scalars = {k: v for k, v in (record.get("summary") or {}).items() if isinstance(v, (int, float, str))}
        rows.append(
            {
                "trial": t.id,
                "status": record["status"],
                **t.fields,
                **scalars,
                **({"error": record["error"]} if "error" in record else {}),
            }
        )
    table = pd.DataFrame(rows)
    ids = [t.id for t in trials]
    folder = root / "trials"
    other = sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name not in set(ids)) if folder.is_dir() else []
    fields = sorted({k for t in trials for k in t.fields})
    write_json(root / "trials.json", {"fields": fields, "ids": ids, **({"other_ids": other} if other else {})})
    write_text(root / "sweep.csv", table.to_csv(index=False))
    return table


def save_view(root: Path, table: Any, command: str, trials: list[Trial]) -> None:
    """`view.json`: the metric the sweep's figure and report draw (the command's primary one, else the first
    numeric), saved so that the report reads the choice from the folder."""
    from attnlab.sweep.figures import pick_metric

    fields = sorted({k for t in trials for k in t.fields})
    write_json(root / "view.json", {"metric": pick_metric(table, command, fields)})


def log_trials(trials: list[Trial], root: Path, kinds: tuple[str, ...]) -> None:
    """One tracker run per finished trial (its fields as parameters, its summary numbers as metrics at step 0, its
    figures and report); TensorBoard writes tensorboard/<trial id>/, MLflow the sweep's mlruns/ (core.tracking)."""
    for t in trials if kinds else []:
        record = trial_state(root / "trials" / t.id) or {}
        if record.get("status") == "done":
            with Tracker(kinds, root, t.id, params=t.fields, sub=t.id) as tracker:
                tracker.log(record.get("summary") or {}, 0)
                tracker.log_outputs(root / "trials" / t.id)  # the trial's figures and report


def _summary(table: Any) -> dict[str, Any]:
    counts = table["status"].value_counts().to_dict()
    failed = [str(t) for t in table.loc[table["status"] == "failed", "trial"]]
    return {
        "trials": len(table),
        "done": int(counts.get("done", 0)),
        "failed": int(counts.get("failed", 0)),
        "failed_trials": failed,
    }


RUNNERS = {"sweep": (SweepConfig, sweep)}
