"""The scan itself: trace every domain's windows, build the head / layer / class tables and the summary
(spec extreme-tokens §10.3-§10.5).

For each domain the N windows of T tokens go through the model one batch at a time inside `traced`, which reduces
every layer's attention on the fly into one `Trace` per domain. `write_scan` saves into a held run folder:
samples.jsonl, traces/<domain>.*, heads.csv, layers.csv, massive.csv, classes.csv, patterns/<domain>/<l>.<h>.npy,
summary.json, metrics.jsonl and the manifest's model and text-source details.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import torch

from attnlab.hf.loader import LoadedModel
from attnlab.hf.texts import source_manifest
from attnlab.runs import RunDir, write_text
from attnlab.scan import analysis, secondary, sinkproc
from attnlab.scan.config import ScanConfig
from attnlab.tracing.adapters.hf import trace_windows
from attnlab.tracing.format import Trace


def auto_pattern_heads(sink: dict[str, np.ndarray], n: int) -> list[tuple[int, int]]:
    """The `n` heads with the largest |sink-score difference| between the first two domains (sink: d -> [L,H])."""
    ds = list(sink)
    if len(ds) < 2 or n <= 0:
        return []
    diff = np.abs(sink[ds[1]] - sink[ds[0]])
    order = np.argsort(-diff, axis=None)[:n]
    return [(int(a), int(b)) for a, b in (np.unravel_index(k, diff.shape) for k in order)]


def write_samples(run: RunDir, ids: dict[str, torch.Tensor]) -> None:
    """samples.jsonl: one line per window with its domain, index and token ids."""
    lines = [
        json.dumps({"domain": d, "sample": i, "token_ids": row}) + "\n"
        for d, x in ids.items()
        for i, row in enumerate(x.tolist())
    ]
    write_text(run.file("samples.jsonl"), "".join(lines))


def keep_patterns(
    run: RunDir, lm: LoadedModel, ids: dict[str, torch.Tensor], chosen: list[tuple[int, int]], factors: dict
) -> None:
    """Full attention maps [T,T] of the chosen heads on the first window of each domain (one extra forward),
    and that window's tokens as text (patterns/<domain>/tokens.json: the report shows them without a tokenizer).
    `factors`: the scan's value-factor cache (`traced`)."""
    if not chosen:
        return
    for d, x in ids.items():
        run.write_json(f"patterns/{d}/tokens.json", [lm.tokenizer.decode([int(i)]) for i in x[0].tolist()])
        tr, _ = trace_windows(
            lm.model, x[:1], 1, keep_patterns=chosen, desc=f"patterns {d}", factors=factors, arch=lm.arch
        )
        for key, pattern in tr.patterns.items():
            run.save_npy(f"patterns/{d}/{key}.npy", pattern[0])


def summarize(
    lm: LoadedModel,
    cfg: ScanConfig,
    traces: dict[str, Trace],
    nll: dict[str, np.ndarray],
    classes: list[dict],
    chosen: list[tuple[int, int]],
) -> dict[str, Any]:
    """summary.json: per-domain headline numbers, class counts, active-dormant heads, domain-pair shifts."""
    sink = {d: traces[d].sink_score() for d in cfg.domains}
    summary: dict[str, Any] = {
        "model": lm.name,
        "model_given": lm.given,  # as the user named it (alias, hub id, path as typed), not an absolute path
        "tokens": cfg.tokens,
        "prefix": cfg.prefix,
        "align": cfg.align,
        "thresholds": {"dormant": analysis.DORMANT, "active": analysis.ACTIVE, "sink_eps": analysis.SINK_EPS},
        "domains": [analysis.domain_summary(d, traces[d], nll[d]) for d in cfg.domains],
        "class_counts": analysis.class_counts(classes),
        "active_dormant": [f"{r['layer']}.{r['head']}" for r in classes if r["class"] == "active-dormant"],
        "pattern_heads": [f"{l}.{h}" for l, h in chosen],
    }
    if len(cfg.domains) >= 2:
        a, b = cfg.domains[0], cfg.domains[1]
        summary[f"dormant_on_{b}_active_on_{a}"] = analysis.pair_shift(sink, a, b)
        summary[f"dormant_on_{a}_active_on_{b}"] = analysis.pair_shift(sink, b, a)
        summary["sink_score_correlation"] = float(np.corrcoef(sink[a].ravel(), sink[b].ravel())[0, 1])
    return summary


def sink_procedure_rows(
    domain: str, trace: Trace, cols: np.ndarray, norms: np.ndarray, cfg: ScanConfig, ids: torch.Tensor, tokenizer: Any
) -> dict[str, list[dict[str, Any]]]:
    """The authors' sink-head procedure (R24, `attnlab.scan.sinkproc`) on one domain's column sums cols
    [N,L,H,T] and residual norms [N,R,T]: the rows of sink_candidates.csv, sink_layers.csv, sink_heads_authors.csv
    and the domain's summary (the [N,L,H,T] arrays are dropped once the rows exist)."""
    proc = sinkproc.sink_procedure(cols, norms, cfg.sink_ratio, cfg.sink_threshold)
    x, key0 = ids.numpy(), trace.sink_score()
    layers = sinkproc.layer_rows(domain, proc, x, tokenizer)
    return {
        "sink_candidates": sinkproc.candidate_rows(domain, proc, x, tokenizer),
        "sink_layers": layers,
        "sink_heads_authors": sinkproc.head_rows(domain, proc, key0),
        "summary": [sinkproc.domain_summary(domain, proc, key0, layers, x, tokenizer)],
    }


def write_secondary(run: RunDir, lm: LoadedModel, cfg: ScanConfig, traces: dict[str, Trace]) -> list[dict]:
    """sinks.csv and sink_levels.csv (`scan.secondary`) when the traces have full-row statistics; the summary's
    per-domain entries either way."""
    tokens: list[dict] = []
    levels: list[dict] = []
    out: list[dict] = []
    for d in cfg.domains:
        lv = secondary.level_rows(d, traces[d], lm.tokenizer)
        tk = secondary.sink_rows(d, traces[d], lm.tokenizer)
        tokens, levels = tokens + tk, levels + lv
        out.append(secondary.domain_summary(d, traces[d], lv, tk))
    if any(o["computed"] for o in out):
        run.write_csv("sinks.csv", tokens)
        run.write_csv("sink_levels.csv", levels)
    return out


def write_scan(run: RunDir, lm: LoadedModel, cfg: ScanConfig, ids: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Trace every domain and write every scan output into `run` (module docstring); returns the summary."""
    t0 = time.perf_counter()
    write_samples(run, ids)
    traces, nll = {}, {}
    proc: dict[str, list[dict[str, Any]]] = {}
    factors: dict = {}  # the value norms' factors, computed once for every domain (`traced`)
    for d in cfg.domains:
        traces[d], nll[d], cols, norms = sinkproc.trace_windows_columns(
            lm.model, ids[d], cfg.batch_size, desc=f"scan {d}", stats=cfg.stats, ratio=cfg.sink_ratio,
            factors=factors, arch=lm.arch,
        )  # fmt: skip
        for name, rows in sink_procedure_rows(d, traces[d], cols, norms, cfg, ids[d], lm.tokenizer).items():
            proc[name] = proc.get(name, []) + rows
        traces[d].save(run.file("traces") / d)
    sink = {d: traces[d].sink_score() for d in cfg.domains}
    classes = analysis.classify_heads(sink)
    chosen = list(dict.fromkeys([*cfg.pattern_heads, *auto_pattern_heads(sink, cfg.n_auto_pattern_heads)]))
    keep_patterns(run, lm, ids, chosen, factors)
    summary = summarize(lm, cfg, traces, nll, classes, chosen)
    run.write_csv("heads.csv", [r for d in cfg.domains for r in analysis.head_rows(d, traces[d])])
    run.write_csv("layers.csv", [r for d in cfg.domains for r in analysis.layer_rows(d, traces[d])])
    run.write_csv(
        "massive.csv",
        [r for d in cfg.domains for r in analysis.massive_rows(d, traces[d], ids[d].numpy(), lm.tokenizer)],
    )
    run.write_csv("classes.csv", classes)
    for name in ("sink_candidates", "sink_layers", "sink_heads_authors"):
        run.write_csv(f"{name}.csv", proc[name])
    summary["sink_procedure"] = proc["summary"]
    summary["secondary_sinks"] = write_secondary(run, lm, cfg, traces)
    run.write_json("summary.json", summary)
    meta = lm.path / "attnlab.json"
    run.write_manifest(
        cfg.seed,
        model=lm.name,
        model_given=lm.given,
        revision=lm.revision,
        placement={"dtype": cfg.dtype, "device": cfg.device, "device_map": cfg.device_map},
        texts=source_manifest(),
        attnlab_model_meta=json.loads(meta.read_text()) if meta.is_file() else {},
        attention_paths={d: traces[d].attention_paths for d in cfg.domains},  # the kernel each layer ran
    )
    seconds = time.perf_counter() - t0
    run.append_metrics({"seconds": seconds, **{f"nll_{d}": float(nll[d].mean()) for d in cfg.domains}})
    return summary
