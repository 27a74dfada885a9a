"""`attnlab demo` as a function: every study's short demo into one run folder with one combined report.

`run_demo(DemoConfig(...), out, mode=...)` validates everything first, then holds `out` through `open_run`, so the
demo keeps the run folders' promises: `mode="overwrite"` sets the earlier demo (or run) aside and deletes it only
once the new demo has finished; a demo that fails or is interrupted puts it back. `mode="resume"` continues a demo
that stopped: the study parts it finished (recorded in `studies.json`) are kept and skipped, an unfinished part
is run again from the start.

The combined `report.html` links the reports the study runs wrote (every run writes its own) and never renders
them again: each study's section holds what its `run_demo` returned (a summary table, a note) and a table of its
run folders with links to their reports.
"""

from __future__ import annotations

import dataclasses
import html
import importlib
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from attnlab.core.registry import demo_modules
from attnlab.errors import AttnlabError, InputError, check_int, names
from attnlab.runs import RunDir, RunResult, frame, open_run, read_json, run_status

# demo section (a spec study) -> the module with its `run_demo(out, seed) -> Report`; the order of the demo report.
# From the one table in attnlab.core.registry.
DEMOS = demo_modules()
MAX_SEED = 2**32 - 1  # every study's generators accept it
PROGRESS = "studies.json"  # the study parts finished so far: [{study, seconds, folder, section}], in order
STUDY_HINT = "; continue with --resume"  # a study run's own hint, which is not the demo's: see _stopped


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    """seed: the seed of every study's demo; only: the studies to run (empty: all, in the order of DEMOS)."""

    seed: int = 0
    only: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_int(self.seed, 0, "--seed", MAX_SEED)
        object.__setattr__(self, "only", names(self.only, "--only"))
        for study in self.only:
            if study not in DEMOS:
                raise InputError(f"--only {study}: unknown study; choose from {', '.join(DEMOS)}")

    def studies(self) -> list[str]:
        return [name for name in DEMOS if not self.only or name in self.only]


def run_demo(
    config: DemoConfig | None,
    out: str | Path = "runs/demo",
    *,
    mode: str = "new",
    echo: Callable[[str], None] | None = None,
) -> RunResult:
    """Run each selected study's demo into `out/<study>` and write `out/report.html`; `echo` gets progress lines.

    config: None only with mode="resume" (the demo's saved config); a config given to a resume must equal the
    saved one. A resume whose every study part finished changes no file (summary["nothing_to_do"]). A failure or
    interrupt after the folder is open is one line saying what is left where."""
    if config is None and mode != "resume":
        raise InputError("run_demo needs a DemoConfig (None only with mode='resume': the saved one)")
    out = Path(out)
    earlier = mode == "overwrite" and out.is_dir() and any(out.iterdir())
    started = False  # refusals before any study ran (a resume's config) are passed on as they are
    done: list[dict] = []
    try:
        with open_run(out, "demo", config, mode=mode, seed=config.seed if config else None) as run:
            config = _resumed(run, config) if mode == "resume" else cast(DemoConfig, config)
            done = _finished(run, config) if mode == "resume" else []
            if mode == "resume" and _nothing_to_do(run, config, done):
                note = f"nothing to do: {out} holds every study part of the demo; no file changed"
                return _result(run.path, config, done, note)
            started = True
            _write_sections(run, config, echo or (lambda line: None), done)
    except (AttnlabError, KeyboardInterrupt) as exc:
        if not started:
            raise
        raise _stopped(exc, out, earlier, [d["study"] for d in done]) from None
    return _result(run.path, config, done)


def _result(path: Path, config: DemoConfig, done: list[dict], note: str | None = None) -> RunResult:
    timings = [{k: d[k] for k in ("study", "seconds", "folder")} for d in done]
    summary: dict[str, Any] = {"studies": [d["study"] for d in done]}
    if note:
        summary["nothing_to_do"] = note
    return RunResult(path, config, summary, {"timings": frame(timings)})


def _resumed(run: RunDir, config: DemoConfig | None) -> DemoConfig:
    """The saved config of the demo in `run`; a `config` that differs from it is refused (the finished study
    parts were run with the saved seed)."""
    from attnlab.runs.configs import config_from_dict

    saved = config_from_dict(DemoConfig, run.read_config())
    if config is not None and config != saved:
        flags = f"--seed {saved.seed}" + "".join(f" --only {s}" for s in saved.only)
        raise InputError(
            f"--resume: {run.path} is a demo run with {flags}; resume it with those flags or none, "
            "or start a new demo with --overwrite"
        )
    return saved


def _finished(run: RunDir, config: DemoConfig) -> list[dict]:
    """The study parts of `config` that the demo in `run` finished (their records in studies.json, whose folder
    is still there), in the order of DEMOS."""
    path = run.file(PROGRESS)
    rows = read_json(path, "demo progress file") if path.is_file() else []
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "study" in r for r in rows):
        raise InputError(f"demo progress file {path} is corrupt (not a list of studies); restore or delete it")
    by_study = {r["study"]: r for r in rows if (run.path / str(r.get("folder", ""))).is_dir()}
    return [by_study[name] for name in config.studies() if name in by_study]


def _nothing_to_do(run: RunDir, config: DemoConfig, done: list[dict]) -> bool:
    return len(done) == len(config.studies()) and run.file("report.html").is_file()


def _write_sections(run: RunDir, config: DemoConfig, echo: Callable[[str], None], done: list[dict]) -> None:
    """The studies' demos into `run` (those in `done` are kept), the combined report after each (a partial report
    if a later one fails); `done` gets one row per finished study, saved in studies.json."""
    from attnlab.reports.page import PLOTLY_ASSET, plotly_asset

    had_asset = run.file(PLOTLY_ASSET).is_file()
    plotly_asset(run.path)  # one copy of plotly.js that every report of the demo refers to
    finished = {d["study"] for d in done}
    try:
        for name in config.studies():
            if name in finished:
                echo(f"== demo: {name} (finished earlier; kept)")
                continue
            done.append(_run_study(run, name, config.seed, echo))
            run.write_json(PROGRESS, _ordered(done))
            run.resume_hint = f"continue it with `attnlab demo --resume --out {run.path}`"
            _write_report(run, _ordered(done), final=False)
    except BaseException:
        if not done and not had_asset:  # nothing finished: leave no folder behind (open_run removes bookkeeping)
            run.file(PLOTLY_ASSET).unlink(missing_ok=True)
        raise
    _write_report(run, _ordered(done), final=True)


def _ordered(done: list[dict]) -> list[dict]:
    return sorted(done, key=lambda d: list(DEMOS).index(d["study"]))


def _run_study(run: RunDir, name: str, seed: int, echo: Callable[[str], None]) -> dict:
    """One study's part into `run/<name>` (a part left unfinished by an earlier attempt is discarded first); its
    record: study, seconds, folder and the report section (its own section and the links to its runs)."""
    folder = run.path / name
    _discard_unfinished(folder)
    t0 = time.perf_counter()
    echo(f"== demo: {name}")
    section = importlib.import_module(DEMOS[name]).run_demo(folder, seed)
    seconds = round(time.perf_counter() - t0, 1)
    links = _links(run.path, folder)
    if links:
        section.raw(links)
    return {"study": name, "seconds": seconds, "folder": name, "section": dataclasses.asdict(section)}


def _discard_unfinished(folder: Path) -> None:
    """Delete what an interrupted attempt at a study part left (renamed first, so a kill mid-delete leaves no half
    folder under the study's name)."""
    if not folder.exists():
        return
    trash = folder.with_name(f".{folder.name}.discard-{os.getpid()}")
    shutil.rmtree(trash, ignore_errors=True)
    folder.rename(trash)
    shutil.rmtree(trash, ignore_errors=True)


def run_folders(folder: Path) -> list[Path]:
    """The run folders under `folder` (those holding manifest.json), outermost only (a sweep's trials are linked
    from the sweep's own report), in sorted order."""
    if (folder / "manifest.json").is_file():
        return [folder]
    if not folder.is_dir():
        return []
    return [run for sub in sorted(folder.iterdir()) if sub.is_dir() for run in run_folders(sub)]


def _links(root: Path, folder: Path) -> str:
    """An HTML table of the run folders under `folder`: command, status, and a link (relative to `root`, where the
    demo's report.html is) to the report each run wrote."""
    rows = []
    for path in run_folders(folder):
        rel = path.relative_to(root).as_posix()
        manifest = read_json(path / "manifest.json", "run manifest")
        command = manifest.get("command", "") if isinstance(manifest, dict) else ""
        has = (path / "report.html").is_file()
        link = f'<a href="{html.escape(rel)}/report.html">{html.escape(rel)}</a>' if has else html.escape(rel)
        rows.append(
            f'<tr><td class="t">{link}</td><td class="t">attnlab {html.escape(str(command))}</td>'
            f'<td class="t">{html.escape(run_status(path))}</td></tr>'
        )
    if not rows:
        return ""
    return (
        '<div class="scroll"><table class="sortable"><caption>The runs of this part and their reports</caption>'
        "<thead><tr><th>run folder (report)</th><th>command</th><th>status</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _write_report(run: RunDir, done: list[dict], final: bool) -> None:
    """The combined report.html from the finished parts' records (no study report is rendered again)."""
    from attnlab.reports.page import Report

    report = Report("attnlab demo")
    report.paragraph(
        "Each section below is one study's part of the demo, run on embedded defaults; its runs are linked in the "
        "section: each run folder (config.json, metrics, figures) has the report its run wrote."
    )
    for d in done:
        report.extend(Report(**d["section"]))
    if final:
        report.table([{k: d[k] for k in ("study", "seconds", "folder")} for d in done], caption="Demo timings")
    report.write(run.file("report.html"))


def _stopped(exc: BaseException, out: Path, earlier: bool, finished: list[str]) -> AttnlabError:
    """The one line for a demo that stopped: why, and what is now in `out`. A study's own hint (a training's
    "continue with --resume") is dropped: that run is not resumed on its own; `attnlab demo --resume` keeps the
    finished study parts and runs the unfinished one again."""
    code = exc.exit_code if isinstance(exc, AttnlabError) else 130
    why = "interrupted" if code == 130 else f"stopped: {str(exc).split(STUDY_HINT)[0]}"
    if earlier:
        where = f"the earlier run in {out} is back in place"
    elif out.exists():
        done = f"the study parts it finished ({', '.join(finished)}) are in" if finished else "no study finished; see"
        where = f"{done} {out}; continue with `attnlab demo --resume --out {out}`"
    else:
        where = "it left no folder"
    return AttnlabError(f"demo {why}; {where}", exit_code=code)
