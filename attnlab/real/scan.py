"""`attnlab scan`: sink, value-drain and residual-peak statistics of a real causal LM on text domains
(spec extreme-tokens §10.3-§10.5).

For each domain, N windows of T tokens (optionally after a prefix token) go through the model one batch at a
time inside `traced`, which reduces every layer's attention on the fly into one `Trace` per domain. The scan
writes heads.csv, layers.csv, massive.csv, classes.csv, samples.jsonl, summary.json, traces/<domain>.* and
figures, and returns a `ScanResult`.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from attnlab.errors import AttnlabError
from attnlab.real import analysis
from attnlab.real.arch import get_arch
from attnlab.hf.loader import LoadedModel
from attnlab.hf.texts import domain_windows, source_manifest
from attnlab.real.tracing import new_recorder, traced
from attnlab.runs import RunDir
from attnlab.trace.format import Trace


@dataclass
class ScanConfig:
    """Resolved scan settings (written to config.json)."""

    model: str = "smollm2"
    domains: list = field(default_factory=lambda: ["prose", "code", "random"])
    tokens: int = 128
    samples: int = 8
    seed: int = 0
    text: str | None = None
    prefix: str = "none"
    align: str = "random"
    batch_size: int = 1
    pattern_heads: list = field(default_factory=list)
    n_auto_pattern_heads: int = 3


@dataclass
class ScanResult:
    traces: dict
    ids: dict
    nll: dict
    heads: list
    layers: list
    massive: list
    classes: list
    summary: dict
    patterns: dict
    seconds: float


def prefix_id(prefix: str, tokenizer) -> int | None:
    """Token id put before every window: none, bos, eos or an integer id."""
    if prefix == "none":
        return None
    if prefix in ("bos", "eos"):
        tid = getattr(tokenizer, f"{prefix}_token_id", None)
        if tid is None:
            raise AttnlabError(f"--prefix {prefix}: this tokenizer has no {prefix.upper()} token")
        return int(tid)
    try:
        tid = int(prefix)
    except ValueError:
        raise AttnlabError(f"--prefix must be none, bos, eos or a token id; got {prefix!r}") from None
    if not 0 <= tid < len(tokenizer):
        raise AttnlabError(f"--prefix {tid} out of range 0..{len(tokenizer) - 1}")
    return tid


def build_windows(lm: LoadedModel, cfg: ScanConfig, domain: str) -> torch.Tensor:
    """[N,T] ids of one domain, with the prefix token (if any) at position 0."""
    pid = prefix_id(cfg.prefix, lm.tokenizer)
    body = cfg.tokens - (1 if pid is not None else 0)
    ids = domain_windows(lm.tokenizer, domain, cfg.samples, body, cfg.seed, text_file=cfg.text,
                         align=cfg.align)
    if pid is not None:
        ids = torch.cat([torch.full((ids.shape[0], 1), pid, dtype=torch.long), ids], dim=1)
    return ids


def next_token_nll(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """[B] mean −log p(x_{t+1} | x_≤t) over t = 0..T−2."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return -logp.gather(-1, ids[:, 1:, None]).squeeze(-1).mean(-1)


def trace_domain(lm: LoadedModel, ids: torch.Tensor, batch_size: int = 1, keep_patterns=(),
                 desc: str = "scan") -> tuple[Trace, np.ndarray]:
    """Stream all windows of one domain through the model; returns its Trace and the per-sample NLL [N]."""
    rec = new_recorder(lm.model, ids.shape[1], keep_patterns=keep_patterns)
    nll = []
    with traced(lm.model, rec), torch.no_grad():
        for b0 in tqdm(range(0, ids.shape[0], batch_size), desc=desc, leave=False):
            batch = ids[b0:b0 + batch_size]
            rec.begin_batch(None, batch_size=batch.shape[0])
            logits = lm.model(input_ids=batch, use_cache=False).logits
            nll.append(next_token_nll(logits, batch))
    return rec.result(), torch.cat(nll).numpy()


def _auto_pattern_heads(sink: dict, n: int) -> list[tuple[int, int]]:
    """Heads with the largest sink-score difference between the first two domains."""
    ds = list(sink)
    if len(ds) < 2 or n <= 0:
        return []
    diff = np.abs(sink[ds[1]] - sink[ds[0]])
    order = np.argsort(-diff, axis=None)[:n]
    return [tuple(int(x) for x in np.unravel_index(k, diff.shape)) for k in order]


def run_scan(lm: LoadedModel, cfg: ScanConfig, out: str | Path | None) -> tuple[RunDir, ScanResult]:
    """Run the scan and write every output into a run folder (see the module docstring)."""
    t0 = time.perf_counter()
    arch = get_arch(lm.model)
    arch.check_seq_len(cfg.tokens)
    if not cfg.domains:
        raise AttnlabError("give at least one --domain (prose, code, random) or --text FILE")
    if cfg.samples < 1 or cfg.batch_size < 1:
        raise AttnlabError(f"--samples and --batch-size must be ≥ 1; got {cfg.samples} and {cfg.batch_size}")
    for l, h in cfg.pattern_heads:
        arch.check_head(l, h)
    run = RunDir(out, "real")
    run.write_config(asdict(cfg) | {"model_path": str(lm.path)})
    ids = {d: build_windows(lm, cfg, d) for d in cfg.domains}
    with open(run.path / "samples.jsonl", "w") as f:
        for d, x in ids.items():
            for i, row in enumerate(x.tolist()):
                f.write(json.dumps({"domain": d, "sample": i, "token_ids": row}) + "\n")
    traces, nll = {}, {}
    for d in cfg.domains:
        traces[d], nll[d] = trace_domain(lm, ids[d], cfg.batch_size, desc=f"scan {d}")
        traces[d].save(run.path / "traces" / d)
    sink = {d: traces[d].sink_score() for d in cfg.domains}
    heads = [r for d in cfg.domains for r in analysis.head_rows(d, traces[d])]
    layers = [r for d in cfg.domains for r in analysis.layer_rows(d, traces[d])]
    massive = [r for d in cfg.domains for r in analysis.massive_rows(d, traces[d], ids[d].numpy(), lm.tokenizer)]
    classes = analysis.classify_heads(sink)
    # Full attention maps of a few heads on the first sample of each domain (one extra forward per domain).
    chosen = list(dict.fromkeys([tuple(h) for h in cfg.pattern_heads] + _auto_pattern_heads(sink, cfg.n_auto_pattern_heads)))
    patterns = {}
    if chosen:
        for d in cfg.domains:
            tr, _ = trace_domain(lm, ids[d][:1], 1, keep_patterns=chosen, desc=f"patterns {d}")
            patterns[d] = {k: v[0] for k, v in tr.patterns.items()}
    summary = {"model": lm.name, "model_path": str(lm.path), "tokens": cfg.tokens, "prefix": cfg.prefix,
               "align": cfg.align,
               "thresholds": {"dormant": analysis.DORMANT, "active": analysis.ACTIVE, "sink_eps": analysis.SINK_EPS},
               "domains": [analysis.domain_summary(d, traces[d], nll[d]) for d in cfg.domains],
               "class_counts": analysis.class_counts(classes),
               "active_dormant": [f"{r['layer']}.{r['head']}" for r in classes if r["class"] == "active-dormant"],
               "pattern_heads": [f"{l}.{h}" for l, h in chosen]}
    if len(cfg.domains) >= 2:
        a, b = cfg.domains[0], cfg.domains[1]
        summary[f"dormant_on_{b}_active_on_{a}"] = analysis.pair_shift(sink, a, b)
        summary[f"dormant_on_{a}_active_on_{b}"] = analysis.pair_shift(sink, b, a)
        summary["sink_score_correlation"] = float(np.corrcoef(sink[a].ravel(), sink[b].ravel())[0, 1])
    run.write_csv("heads.csv", heads)
    run.write_csv("layers.csv", layers)
    run.write_csv("massive.csv", massive)
    run.write_csv("classes.csv", classes)
    run.write_json("summary.json", summary)
    run.write_manifest(cfg.seed, model=lm.name, model_path=str(lm.path), texts=source_manifest(),
                       attnlab_model_meta=_model_meta(lm.path))
    seconds = time.perf_counter() - t0
    run.append_metrics({"seconds": seconds, **{f"nll_{d}": float(nll[d].mean()) for d in cfg.domains}})
    return run, ScanResult(traces=traces, ids=ids, nll=nll, heads=heads, layers=layers, massive=massive,
                           classes=classes, summary=summary, patterns=patterns, seconds=seconds)


def _model_meta(path: Path) -> dict:
    meta = path / "attnlab.json"
    return json.loads(meta.read_text()) if meta.is_file() else {}
