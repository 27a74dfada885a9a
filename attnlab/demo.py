"""`attnlab demo` as a function: every study's short demo into one run folder with one combined report.

`run_demo(DemoConfig(...), out, mode=...)` validates everything first, then holds `out` through `open_run`, so the
demo keeps the run folders' promises: `mode="overwrite"` sets the earlier demo (or run) aside and deletes it only
once the new demo has finished; a demo that fails or is interrupted puts it back.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
from collections.abc import Callable
from pathlib import Path

from attnlab.errors import AttnlabError, InputError, check_int, names
from attnlab.registry import demo_modules
from attnlab.runs import RunDir, RunResult, frame, open_run

# demo section (a spec study) -> the module with its `run_demo(out, seed) -> Report`; the order of the demo report.
# From the one table in attnlab.registry.
DEMOS = demo_modules()
MAX_SEED = 2**32 - 1  # every study's generators accept it


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
    config: DemoConfig,
    out: str | Path = "runs/demo",
    *,
    mode: str = "new",
    echo: Callable[[str], None] | None = None,
) -> RunResult:
    """Run each selected study's demo into `out/<study>` and write `out/report.html`; `echo` gets progress lines.
    A failure or interrupt after the folder is open is one line saying what is left where."""
    out = Path(out)
    earlier = mode == "overwrite" and out.is_dir() and any(out.iterdir())
    opened = False
    timings: list[dict] = []
    try:
        with open_run(out, "demo", config, mode=mode, seed=config.seed) as run:
            opened = True
            _write_sections(run, config, echo or (lambda line: None), timings)
    except (AttnlabError, KeyboardInterrupt) as exc:
        if not opened:
            raise
        raise _stopped(exc, out, earlier, [t["study"] for t in timings]) from None
    return RunResult(run.path, config, {"studies": [t["study"] for t in timings]}, {"timings": frame(timings)})


def _write_sections(run: RunDir, config: DemoConfig, echo: Callable[[str], None], timings: list[dict]) -> None:
    """The studies' demos into `run`, the combined report after each (a partial report if a later one fails);
    `timings` gets one row per finished study."""
    from attnlab.report import PLOTLY_ASSET, Report, plotly_asset

    plotly_asset(run.path)  # one copy of plotly.js that every report of the demo refers to
    report = Report("attnlab demo")
    report.paragraph(
        "Each section below is one study's demo, run on embedded defaults; its own run folder "
        "(with config.json, metrics and figures) is named in the section."
    )
    try:
        for name in config.studies():
            t0 = time.perf_counter()
            echo(f"== demo: {name}")
            report.extend(importlib.import_module(DEMOS[name]).run_demo(run.path / name, config.seed))
            timings.append({"study": name, "seconds": round(time.perf_counter() - t0, 1), "folder": name})
            report.write(run.file("report.html"))
    except BaseException:
        if not timings:  # nothing finished: leave no folder behind (open_run removes one of bookkeeping only)
            run.file(PLOTLY_ASSET).unlink(missing_ok=True)
        raise
    report.table(timings, caption="Demo timings")
    report.write(run.file("report.html"))


def _stopped(exc: BaseException, out: Path, earlier: bool, finished: list[str]) -> AttnlabError:
    """The one line for a demo that stopped: why, and what is now in `out`. A study's own hint (a training's
    "continue with --resume") is dropped: `attnlab demo` has no --resume, it runs again with --overwrite."""
    code = exc.exit_code if isinstance(exc, AttnlabError) else 130
    why = "interrupted" if code == 130 else f"stopped: {str(exc).split('; continue with --resume')[0]}"
    if earlier:
        where = f"the earlier run in {out} is back in place"
    elif out.exists():
        done = f"the studies it finished ({', '.join(finished)}) are in" if finished else "no study finished; see"
        where = f"{done} {out}; run it again with --overwrite"
    else:
        where = "it left no folder"
    return AttnlabError(f"demo {why}; {where}", exit_code=code)
