"""`attnlab deploy quantize|window` as functions -> `RunResult` (spec extreme-tokens §14, R23).

The model is loaded and the windows and sizes checked before the run folder is opened, so bad input leaves no
folder behind. `quantize` writes perplexity.csv, samples.csv (per-window NLL), outliers.csv (channels left out of
the scale), summary.json; `window` writes perplexity.csv, nll/<domain>/<policy>.npy (per-position NLL [N, T−1]),
summary.json; both write manifest.json, metrics.jsonl, figures/ and report.html.
"""

from __future__ import annotations

import time
from pathlib import Path

from tqdm import tqdm

from attnlab.deploy.compute import check_full_attention, frequent_outliers, quant_domain, window_domain
from attnlab.deploy.config import QuantizeConfig, SlidingWindowConfig
from attnlab.deploy.figures import quantize_figures, window_figures
from attnlab.deploy.report import write_report
from attnlab.deploy.tables import read_table, slug
from attnlab.errors import InputError
from attnlab.hf.loader import LoadedModel, load_checked
from attnlab.hf.texts import config_windows, source_manifest
from attnlab.runs import RunResult, open_run, write_text

OUTLIER_COLUMNS = ("domain", "site", "layer", "module", "channel", "windows", "max_ratio")


def _ppl_by_domain(rows: list[dict], key: str) -> dict:
    """{domain: {row[key]: perplexity}}."""
    out: dict = {}
    for r in rows:
        out.setdefault(r["domain"], {})[r[key]] = r["perplexity"]
    return out


def quantize(
    config: QuantizeConfig, out: str | Path | None = None, *, mode: str = "new", lm: LoadedModel | None = None
) -> RunResult:
    """Perplexity of every (site, policy) on every domain into `out` (None: runs/deploy-quantize-<time>); `lm`:
    an already loaded `config.model`. Tables: "perplexity", "outliers"."""
    if mode == "resume":
        raise InputError("deploy quantize has no --resume; use --overwrite or a new --out")
    lm = load_checked(config, lm)
    arch = lm.arch
    ids = {d: config_windows(lm.tokenizer, config, d) for d in config.domains}
    with open_run(out, "deploy quantize", config, mode=mode, seed=config.seed) as run:
        t0 = time.perf_counter()
        rows: list[dict] = []
        samples: list[dict] = []
        outliers: list[dict] = []
        for d in tqdm(config.domains, desc="deploy quantize", leave=False):
            r, s, o = quant_domain(lm.model, arch, config, d, ids[d])
            rows, samples, outliers = rows + r, samples + s, outliers + o
            for row in r:
                run.append_metrics({k: row[k] for k in ("domain", "label", "perplexity", "seconds")})
        summary = {
            "perplexity": _ppl_by_domain(rows, "label"),
            "outlier_channels": frequent_outliers(outliers, config.samples),
            "seconds": time.perf_counter() - t0,
        }
        run.write_csv("perplexity.csv", rows)
        run.write_csv("samples.csv", samples)
        if outliers:
            run.write_csv("outliers.csv", outliers)
        else:  # none found (or no exclude / clip policy): the header alone
            write_text(run.file("outliers.csv"), ",".join(OUTLIER_COLUMNS) + "\n")
        run.write_json("summary.json", summary)
        run.write_manifest(config.seed, model=lm.name, model_given=lm.given, texts=source_manifest())
        quantize_figures(run.path)
        write_report(run)
    tables = {"perplexity": read_table(run.path, "perplexity.csv"), "outliers": read_table(run.path, "outliers.csv")}
    return RunResult(path=run.path, config=config, summary=summary, tables=tables)


def window(
    config: SlidingWindowConfig, out: str | Path | None = None, *, mode: str = "new", lm: LoadedModel | None = None
) -> RunResult:
    """Perplexity of full attention and each window policy on every domain into `out` (None:
    runs/deploy-window-<time>); `lm`: an already loaded `config.model`. Table: "perplexity"."""
    if mode == "resume":
        raise InputError("deploy window has no --resume; use --overwrite or a new --out")
    lm = load_checked(config, lm)
    check_full_attention(lm.arch, config.tokens)
    ids = {d: config_windows(lm.tokenizer, config, d) for d in config.domains}
    with open_run(out, "deploy window", config, mode=mode, seed=config.seed) as run:
        t0 = time.perf_counter()
        rows = []
        for d in tqdm(config.domains, desc="deploy window", leave=False):
            r, arrays = window_domain(lm.model, config, d, ids[d])
            rows += r
            for name, pos in arrays.items():
                run.save_npy(f"nll/{d}/{slug(name)}.npy", pos)
            for row in r:
                run.append_metrics({k: row[k] for k in ("domain", "policy", "perplexity", "seconds")})
        summary = {"perplexity": _ppl_by_domain(rows, "policy"), "seconds": time.perf_counter() - t0}
        run.write_csv("perplexity.csv", rows)
        run.write_json("summary.json", summary)
        run.write_manifest(config.seed, model=lm.name, model_given=lm.given, texts=source_manifest())
        window_figures(run.path)
        write_report(run)
    return RunResult(path=run.path, config=config, summary=summary, tables={"perplexity": read_table(run.path)})


RUNNERS = {"deploy quantize": (QuantizeConfig, quantize), "deploy window": (SlidingWindowConfig, window)}
