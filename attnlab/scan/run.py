"""`attnlab scan` as a function: `scan(ScanConfig(...), out)` -> `RunResult` (spec extreme-tokens §10.3-§10.5).

The model is loaded and every index and window checked before the run folder is opened, so a bad input leaves
no folder behind. The run folder holds config.json, manifest.json, metrics.jsonl, samples.jsonl, traces/,
patterns/, heads.csv, layers.csv, massive.csv, classes.csv, summary.json, figures/ and report.html.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from attnlab.errors import InputError
from attnlab.hf.loader import LoadedModel, check_unloaded, load_checked, same_architecture
from attnlab.hf.texts import config_windows
from attnlab.runs import RunDir, RunResult, config_hash, open_run, write_json
from attnlab.scan.compute import write_scan
from attnlab.scan.config import ScanConfig
from attnlab.scan.report import write_report
from attnlab.scan.tables import read_tables

MAX_COLUMN_BYTES = 4 * 2**30  # column sums (float32), mean scores (float32) and sink flags, per domain


def scan(
    config: ScanConfig, out: str | Path | None = None, *, mode: str = "new", lm: LoadedModel | None = None
) -> RunResult:
    """Run the scan into `out` (None: runs/scan-<time>); `lm`: an already loaded `config.model` (saves a load).

    Returns a `RunResult` whose tables are DataFrames: heads, layers, massive, classes.
    """
    if mode == "resume":
        raise InputError("scan has no --resume (a scan takes minutes); use --overwrite or a new --out")
    if config.checkpoints:
        return run_series(config, out, mode=mode)
    lm = load_checked(config, lm)
    shape = lm.arch.shape
    for layer, head in config.pattern_heads:
        shape.check_head(layer, head)
    need = config.samples * shape.n_layers * shape.n_heads * config.tokens * 9  # R24's per-window columns, bytes
    if need > MAX_COLUMN_BYTES:
        raise InputError(
            f"--samples {config.samples} × {shape.n_layers} layers × {shape.n_heads} heads × --tokens {config.tokens} "
            f"needs {need / 2**30:.1f} GiB for the sink-head procedure's per-window columns (limit "
            f"{MAX_COLUMN_BYTES / 2**30:.0f} GiB); scan fewer windows or shorter ones"
        )
    ids = {d: config_windows(lm.tokenizer, config, d) for d in config.domains}
    with open_run(out, "scan", config, mode=mode, seed=config.seed) as run:
        summary = write_scan(run, lm, config, ids)
        write_report(run)
    return RunResult(path=run.path, config=config, summary=summary, tables=read_tables(run.path))


def _checkpoint_config(config: ScanConfig, model: str, revision: str | None) -> ScanConfig:
    return dataclasses.replace(config, model=model, revision=revision, checkpoints=())


def mark_scan_run(sub: RunDir, cfg: ScanConfig) -> None:
    """Make a checkpoint's folder a `scan` run folder of its own (its config.json, and the command and config hash
    that write_scan's manifest keeps), so `attnlab compare` and `attnlab view` read two checkpoints of a series."""
    sub.write_config(cfg)
    write_json(sub.file("manifest.json"), {"command": "scan", "config_hash": config_hash(cfg)})


def run_series(config: ScanConfig, out: str | Path | None = None, *, mode: str = "new") -> RunResult:
    """A checkpoint series (`attnlab.scan.series`): every checkpoint is checked before the folder opens
    (`_check_series`: each loaded at most once, one model held at a time), then scanned into
    checkpoints/<k>-<label>/; series.csv and figures/checkpoint_series.png sum them up; sink_dynamics.csv and
    figures/sink_dynamics.png follow the final checkpoint's sink heads through the series (R25). Returns tables
    {"series": DataFrame}."""
    import pandas as pd

    from attnlab.hf.checkpoints import checkpoint_label, checkpoint_step
    from attnlab.scan.series import dynamics_rows, series_rows
    from attnlab.tracing.format import Trace

    cfgs = [_checkpoint_config(config, model, rev) for model, rev in config.checkpoints]
    held: LoadedModel | None = _check_series(cfgs)
    rows: list[dict] = []
    points: dict[str, list] = {d: [] for d in config.domains}  # domain -> [(label, step, trace)]
    with open_run(out, "scan", config, mode=mode, seed=config.seed) as run:
        for k, (model, rev) in enumerate(config.checkpoints):
            cfg = _checkpoint_config(config, model, rev)
            lm, held = (held, None) if k == 0 and held is not None else (load_checked(cfg), None)
            label = checkpoint_label(model, rev)
            sub = RunDir(run.file("checkpoints") / f"{k:03d}-{label}")
            mark_scan_run(sub, cfg)
            ids = {d: config_windows(lm.tokenizer, cfg, d) for d in cfg.domains}
            summary = write_scan(sub, lm, cfg, ids)
            traces = {d: Trace.load(sub.file("traces") / d) for d in cfg.domains}
            nll = {d["domain"]: d["nll"] for d in summary["domains"]}
            rows += series_rows(label, checkpoint_step(label, k), model, rev, traces, nll)
            for d in cfg.domains:
                points[d].append((label, checkpoint_step(label, k), traces[d]))
            write_report(sub)
        dyn = [r for d in config.domains for r in dynamics_rows(d, points[d])]
        run.write_csv("series.csv", rows)
        run.write_csv("sink_dynamics.csv", dyn)
        run.write_json("summary.json", {"checkpoints": len(config.checkpoints), "series": rows, "sink_dynamics": dyn})
        write_report(run)
    return RunResult(path=run.path, config=config, summary={"series": rows}, tables={"series": pd.DataFrame(rows)})


def _check_series(cfgs: list[ScanConfig]) -> LoadedModel:
    """Refuse a bad checkpoint before the folder opens, loading each checkpoint's weights at most once: every
    folder is checked without weights, the first checkpoint is loaded and checked to be traceable (returned, to be
    scanned first), and a later checkpoint is loaded for the check only when its config builds another module tree
    (traceability depends on the modules, not the weights)."""
    arches = [check_unloaded(cfg) for cfg in cfgs]
    first = load_checked(cfgs[0])
    for cfg, arch in zip(cfgs[1:], arches[1:], strict=True):
        if not same_architecture(arch, arches[0]):
            load_checked(cfg)
    return first


RUNNERS = {"scan": (ScanConfig, scan)}
