"""`attnlab scan` as a function: `scan(ScanConfig(...), out)` -> `RunResult` (spec extreme-tokens §10.3-§10.5).

The model is loaded and every index and window checked before the run folder is opened, so a bad input leaves
no folder behind. The run folder holds config.json, manifest.json, metrics.jsonl, samples.jsonl, traces/,
patterns/, heads.csv, layers.csv, massive.csv, classes.csv, summary.json, figures/ and report.html.
"""

from __future__ import annotations

from pathlib import Path

from attnlab.errors import InputError
from attnlab.hf.arch import get_arch
from attnlab.hf.loader import LoadedModel
from attnlab.hf.settings import config_windows, load_checked
from attnlab.runs import RunResult, open_run
from attnlab.scan.compute import write_scan
from attnlab.scan.config import ScanConfig
from attnlab.scan.report import read_tables, write_report


def run(
    config: ScanConfig, out: str | Path | None = None, *, mode: str = "new", lm: LoadedModel | None = None
) -> RunResult:
    """Run the scan into `out` (None: runs/scan-<time>); `lm`: an already loaded `config.model` (saves a load).

    Returns a `RunResult` whose tables are DataFrames: heads, layers, massive, classes.
    """
    if mode == "resume":
        raise InputError("scan has no --resume (a scan takes minutes); use --overwrite or a new --out")
    lm = load_checked(config, lm)
    shape = get_arch(lm.model).shape
    for layer, head in config.pattern_heads:
        shape.check_head(layer, head)
    ids = {d: config_windows(lm.tokenizer, config, d) for d in config.domains}
    with open_run(out, "scan", config, mode=mode, seed=config.seed) as run:
        summary = write_scan(run, lm, config, ids)
        write_report(run.path)
    return RunResult(path=run.path, config=config, summary=summary, tables=read_tables(run.path))


scan = run

RUNNERS = {"scan": (ScanConfig, run)}
