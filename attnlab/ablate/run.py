"""`attnlab ablate` as a function: `ablate(AblateConfig(...), out)` -> `RunResult` (spec extreme-tokens §7, §10.5).

The model is loaded and every condition's indices and the windows checked before the run folder is opened, so a
bad input leaves no folder behind. The run folder holds config.json, manifest.json, metrics.jsonl, ablation.csv,
heads.csv (ΔNLL per head), summary.json, figures/ and report.html.
"""

from __future__ import annotations

import time
from pathlib import Path

from attnlab.ablate.compute import ablate_domain, build_conditions, by_state, head_rows, scan_sink_scores
from attnlab.ablate.config import AblateConfig
from attnlab.ablate.report import write_report
from attnlab.ablate.tables import read_rows
from attnlab.errors import InputError
from attnlab.hf.heads import ACTIVE, DORMANT
from attnlab.hf.loader import LoadedModel, load_checked
from attnlab.hf.texts import config_windows, source_manifest
from attnlab.runs import RunResult, frame, open_run


def ablate(
    config: AblateConfig, out: str | Path | None = None, *, mode: str = "new", lm: LoadedModel | None = None
) -> RunResult:
    """Run every condition on every domain into `out` (None: runs/ablate-<time>); `lm`: an already loaded
    `config.model`. Returns a `RunResult` with the table "ablation" (one row per domain and condition)."""
    if mode == "resume":
        raise InputError("ablate has no --resume; use --overwrite or a new --out")
    lm = load_checked(config, lm)
    shape = lm.arch.shape
    conds = build_conditions(config, shape)
    sinks = scan_sink_scores(config)
    ids = {d: config_windows(lm.tokenizer, config, d) for d in config.domains}
    with open_run(out, "ablate", config, mode=mode, seed=config.seed) as run:
        t0 = time.perf_counter()
        rows: list[dict] = []
        baseline = {}
        for d in config.domains:
            baseline[d], domain_rows = ablate_domain(lm.model, config, d, ids[d], conds, sinks.get(d))
            rows += domain_rows
        summary = {"baseline": baseline, "by_state": by_state(rows)}
        run.write_csv("ablation.csv", rows)
        heads = head_rows(rows)
        run.write_csv("heads.csv", heads)  # ΔNLL per head, keyed like a scan's heads.csv (a grid's statistic)
        run.write_json("summary.json", summary)
        run.write_manifest(
            config.seed,
            model=lm.name,
            model_given=lm.given,
            texts=source_manifest(),
            conditions=[c.name for c in conds],
            heads_shape=[shape.n_layers, shape.n_heads],  # the [layer, head] grid of heads.csv
            thresholds={"dormant": DORMANT, "active": ACTIVE},  # the head states of ablation.csv (sink score)
        )
        run.append_metrics({"seconds": time.perf_counter() - t0})
        write_report(run)
    tables = {"ablation": read_rows(run.path), "heads": frame(heads)}
    return RunResult(path=run.path, config=config, summary=summary, tables=tables)


RUNNERS = {"ablate": (AblateConfig, ablate)}
