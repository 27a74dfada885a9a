"""`attnlab ablate`: change in next-token loss when heads, MLPs or residual coordinates are switched off
(spec extreme-tokens §7, §10.5).

Conditions: each `--head L.H` (z^h zeroed before the output projection), each `--sink-head L.H` (attention moved
onto key 0), each `--mlp L`, each `--dim L:POS:DIM` (POS may be `*`), every head of each `--sweep-layer L`, and with
`--together` all listed interventions at once. For every domain the baseline run is traced (sink scores of all
heads) and each condition is run on the same windows; ΔNLL_h(D) = NLL(ablated) − NLL(clean), averaged over the
samples with its standard error. A head counts as dormant on D when its sink score is ≥ 0.5 (spec §10.4).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from attnlab.errors import AttnlabError
from attnlab.real.analysis import ACTIVE, DORMANT
from attnlab.real.arch import Arch, get_arch
from attnlab.hf.loader import LoadedModel
from attnlab.real.scan import ScanConfig, build_windows, next_token_nll, trace_domain
from attnlab.hf.texts import source_manifest
from attnlab.real.tracing import Interventions, forward_logits
from attnlab.runs import RunDir


@dataclass
class AblateConfig:
    """Resolved ablation settings (written to config.json)."""

    model: str = "smollm2"
    domains: list = field(default_factory=lambda: ["prose", "code"])
    tokens: int = 128
    samples: int = 8
    seed: int = 0
    text: str | None = None
    prefix: str = "none"
    align: str = "random"
    batch_size: int = 4
    heads: list = field(default_factory=list)        # [(layer, head)]
    sink_heads: list = field(default_factory=list)   # [(layer, head)]
    mlps: list = field(default_factory=list)         # [layer]
    dims: list = field(default_factory=list)         # [(layer, pos or None, dim)]
    sweep_layers: list = field(default_factory=list)
    together: bool = False


@dataclass
class Condition:
    name: str
    kind: str
    layer: int
    head: int | None
    interventions: Interventions


def parse_head(text: str) -> tuple[int, int]:
    """'L.H' -> (L, H)."""
    try:
        l, h = text.split(".")
        return int(l), int(h)
    except ValueError:
        raise AttnlabError(f"--head expects LAYER.HEAD such as 12.3; got {text!r}") from None


def parse_dim(text: str) -> tuple[int, int | None, int]:
    """'L:POS:DIM' (POS may be '*') -> (L, POS or None, DIM)."""
    try:
        l, pos, d = text.split(":")
        return int(l), (None if pos == "*" else int(pos)), int(d)
    except ValueError:
        raise AttnlabError(f"--dim expects LAYER:POS:DIM such as 11:0:507 (POS may be *); got {text!r}") from None


def build_conditions(cfg: AblateConfig, arch: Arch) -> list[Condition]:
    """Expand the config into single-intervention conditions (plus one combined condition with --together)."""
    conds: list[Condition] = []
    heads = list(dict.fromkeys([tuple(h) for h in cfg.heads]
                               + [(l, h) for l in cfg.sweep_layers for h in range(arch.n_heads)]))
    for l in cfg.sweep_layers:
        arch.check_layer(l, "--sweep-layer")
    for l, h in heads:
        conds.append(Condition(f"head {l}.{h}", "head", l, h, Interventions(zero_heads={(l, h)})))
    for l, h in cfg.sink_heads:
        conds.append(Condition(f"sink {l}.{h}", "sink", l, h, Interventions(sink_heads={(l, h)})))
    for l in cfg.mlps:
        conds.append(Condition(f"mlp {l}", "mlp", l, None, Interventions(zero_mlps={l})))
    for l, pos, d in cfg.dims:
        conds.append(Condition(f"dim {l}:{'*' if pos is None else pos}:{d}", "dim", l, None,
                               Interventions(zero_dims=[(l, pos, [d])])))
    if not conds:
        raise AttnlabError("nothing to ablate: give --head L.H, --sink-head L.H, --mlp L, --dim L:POS:DIM or "
                           "--sweep-layer L")
    for c in conds:
        c.interventions.validate(arch)
        if c.kind == "dim" and c.interventions.zero_dims[0][1] is not None \
                and not 0 <= c.interventions.zero_dims[0][1] < cfg.tokens:
            raise AttnlabError(f"--dim position {c.interventions.zero_dims[0][1]} out of range 0..{cfg.tokens - 1}")
    if cfg.together and len(conds) > 1:
        iv = Interventions()
        for c in conds:
            iv.zero_heads |= c.interventions.zero_heads
            iv.sink_heads |= c.interventions.sink_heads
            iv.zero_mlps |= c.interventions.zero_mlps
            iv.zero_dims += c.interventions.zero_dims
        conds.append(Condition("together", "together", -1, None, iv))
    return conds


def _nll(model, ids: torch.Tensor, iv: Interventions | None, batch_size: int) -> np.ndarray:
    out = [next_token_nll(forward_logits(model, ids[b:b + batch_size], None, iv), ids[b:b + batch_size])
           for b in range(0, ids.shape[0], batch_size)]
    return torch.cat(out).numpy()


def run_ablation(lm: LoadedModel, cfg: AblateConfig, out: str | Path | None,
                 sink_scores: dict | None = None) -> tuple[RunDir, list[dict], dict]:
    """Baseline and ablated runs on every domain; returns the run folder, rows and a summary.

    `sink_scores` {domain: [L,H]}: sink scores measured on the same windows by a scan; for those domains the
    baseline runs with the model's own attention instead of being traced again.
    """
    t0 = time.perf_counter()
    arch = get_arch(lm.model)
    arch.check_seq_len(cfg.tokens)
    conds = build_conditions(cfg, arch)
    if not cfg.domains:
        raise AttnlabError("give at least one --domain (prose, code, random) or --text FILE")
    run = RunDir(out, "real")
    run.write_config(asdict(cfg) | {"model_path": str(lm.path), "conditions": [c.name for c in conds]})
    scfg = ScanConfig(model=cfg.model, domains=cfg.domains, tokens=cfg.tokens, samples=cfg.samples, seed=cfg.seed,
                      text=cfg.text, prefix=cfg.prefix, align=cfg.align)
    rows: list[dict] = []
    baseline = {}
    for d in cfg.domains:
        ids = build_windows(lm, scfg, d)
        if sink_scores is not None and d in sink_scores:
            sink, nll0 = np.asarray(sink_scores[d]), _nll(lm.model, ids, None, cfg.batch_size)
        else:
            trace, nll0 = trace_domain(lm, ids, batch_size=1, desc=f"baseline {d}")
            sink = trace.sink_score()
        baseline[d] = {"nll": float(nll0.mean()), "perplexity": float(np.exp(nll0.mean()))}
        for c in tqdm(conds, desc=f"ablate {d}", leave=False):
            nll1 = _nll(lm.model, ids, c.interventions, cfg.batch_size)
            delta = nll1 - nll0
            s = float(sink[c.layer, c.head]) if c.head is not None else None
            state = "" if s is None else ("dormant" if s >= DORMANT else ("active" if s < ACTIVE else "between"))
            rows.append({"domain": d, "condition": c.name, "kind": c.kind, "layer": c.layer,
                         "head": "" if c.head is None else c.head, "sink_score": "" if s is None else s,
                         "state": state, "nll_clean": float(nll0.mean()), "nll_ablated": float(nll1.mean()),
                         "dnll_mean": float(delta.mean()),
                         "dnll_se": float(delta.std(ddof=1) / np.sqrt(len(delta))) if len(delta) > 1 else 0.0})
    summary = {"baseline": baseline, "by_state": _by_state(rows)}
    run.write_csv("ablation.csv", rows)
    run.write_json("summary.json", summary)
    run.write_manifest(cfg.seed, model=lm.name, model_path=str(lm.path), texts=source_manifest())
    run.append_metrics({"seconds": time.perf_counter() - t0})
    return run, rows, summary


def _by_state(rows: list[dict]) -> dict:
    """Mean |ΔNLL| of zeroed heads grouped by their state on the domain (dormant / between / active)."""
    out = {}
    for state in ("dormant", "between", "active"):
        vals = [abs(r["dnll_mean"]) for r in rows if r["kind"] == "head" and r["state"] == state]
        out[state] = {"n": len(vals), "mean_abs_dnll": float(np.mean(vals)) if vals else None,
                      "max_abs_dnll": float(np.max(vals)) if vals else None}
    return out
