"""The ablation itself: the change in next-token loss when heads, MLPs or residual coordinates are switched off
(spec extreme-tokens §7, §10.5).

Conditions: each head (z^h zeroed before the output projection, `ZeroHead`), each sink head (attention moved onto
key 0, `MoveToSink`), each MLP (`ZeroMLP`), each residual coordinate (`ZeroDims`; position or every position), every
head of each sweep layer, and with `together` all listed interventions at once. For every domain the baseline run
is traced (sink scores of all heads; or they are read from a scan run on the same windows) and each condition is
run on the same windows; ΔNLL_h(D) = NLL(ablated) − NLL(clean), averaged over the samples with its standard
error. A head counts as dormant on D when its sink score is ≥ 0.5 (spec §10.4).

`head_rows` turns the head conditions into the per-head table `heads.csv` (domain, layer, head: the same keys as a
scan's heads.csv), so that a layer × head grid can be coloured by the ablation ΔNLL (issue 21).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from attnlab.ablate.config import AblateConfig
from attnlab.errors import InputError
from attnlab.hf.heads import state_of
from attnlab.runs import read_json
from attnlab.tracing.adapters.hf import trace_windows, windows_nll
from attnlab.tracing.format import Trace
from attnlab.tracing.interventions import Intervention, ModelShape, MoveToSink, ZeroDims, ZeroHead, ZeroMLP, validate

# scan settings that must agree for its sink scores to describe the ablation's windows
SAME_WINDOWS = ("model", "revision", "tokens", "samples", "seed", "text", "prefix", "align")


@dataclass(frozen=True)
class Condition:
    """One ablated run: its name in ablation.csv, kind, layer and head (None for MLPs and dims), interventions."""

    name: str
    kind: str
    layer: int
    head: int | None
    interventions: tuple[Intervention, ...]


def build_conditions(cfg: AblateConfig, shape: ModelShape) -> list[Condition]:
    """Expand the config into single-intervention conditions (plus "together"), every index checked."""
    for layer in cfg.sweep_layers:
        shape.check_layer(layer, "sweep layer")
    heads = list(dict.fromkeys([*cfg.heads, *[(l, h) for l in cfg.sweep_layers for h in range(shape.n_heads)]]))
    conds = [Condition(f"head {l}.{h}", "head", l, h, (ZeroHead(l, h),)) for l, h in heads]
    conds += [Condition(f"sink {l}.{h}", "sink", l, h, (MoveToSink(l, h),)) for l, h in cfg.sink_heads]
    conds += [Condition(f"mlp {l}", "mlp", l, None, (ZeroMLP(l),)) for l in cfg.mlps]
    for l, pos, d in cfg.dims:
        conds.append(
            Condition(
                f"dim {l}:{'*' if pos is None else pos}:{d}",
                "dim",
                l,
                None,
                (ZeroDims(l, (d,), None if pos is None else (pos,)),),
            )
        )
    for c in conds:
        validate(c.interventions, shape)
    if cfg.together and len(conds) > 1:
        conds.append(Condition("together", "together", -1, None, tuple(iv for c in conds for iv in c.interventions)))
    return conds


def scan_sink_scores(cfg: AblateConfig) -> dict[str, np.ndarray]:
    """{domain: [L,H] sink scores} from the scan run `cfg.sink_from` (same windows), for the domains it holds."""
    if cfg.sink_from is None:
        return {}
    folder = Path(cfg.sink_from)
    manifest = read_json(folder / "manifest.json", "scan run manifest")
    if manifest.get("command") != "scan":
        raise InputError(f"sink_from {folder} is not a run of `attnlab scan`")
    scan = read_json(folder / "config.json", "scan run config")
    for key in SAME_WINDOWS:
        if scan.get(key) != getattr(cfg, key, None):  # a scan from before `revision` existed reads as None
            raise InputError(
                f"sink_from {folder}: its {key} is {scan.get(key)!r}, this ablation's is "
                f"{getattr(cfg, key)!r}; the windows differ"
            )
    return {d: Trace.load(folder / "traces" / d).sink_score() for d in cfg.domains if d in scan.get("domains", [])}


def row(domain: str, c: Condition, sink: np.ndarray, nll0: np.ndarray, nll1: np.ndarray) -> dict:
    """One line of ablation.csv: the condition, the zeroed head's sink score and state, and ΔNLL ± s.e."""
    delta = nll1 - nll0
    s = float(sink[c.layer, c.head]) if c.head is not None else None
    return {
        "domain": domain,
        "condition": c.name,
        "kind": c.kind,
        "layer": c.layer,
        "head": "" if c.head is None else c.head,
        "sink_score": "" if s is None else s,
        "state": "" if s is None else state_of(s),
        "nll_clean": float(nll0.mean()),
        "nll_ablated": float(nll1.mean()),
        "dnll_mean": float(delta.mean()),
        "dnll_se": float(delta.std(ddof=1) / np.sqrt(len(delta))) if len(delta) > 1 else 0.0,
    }


def ablate_domain(
    model: torch.nn.Module,
    cfg: AblateConfig,
    domain: str,
    ids: torch.Tensor,
    conds: list[Condition],
    sink: np.ndarray | None,
) -> tuple[dict, list[dict]]:
    """Baseline and every condition on one domain's windows `ids` [N,T]; returns (baseline entry, rows).

    `sink` [L,H]: sink scores measured on the same windows by a scan; then the baseline runs with the model's own
    attention instead of being traced again.
    """
    if sink is not None:
        nll0 = windows_nll(model, ids, (), cfg.batch_size)
    else:
        trace, nll0 = trace_windows(model, ids, batch_size=1, desc=f"baseline {domain}")
        sink = trace.sink_score()
    baseline = {"nll": float(nll0.mean()), "perplexity": float(np.exp(nll0.mean()))}
    rows = [
        row(domain, c, sink, nll0, windows_nll(model, ids, c.interventions, cfg.batch_size))
        for c in tqdm(conds, desc=f"ablate {domain}", leave=False)
    ]
    return baseline, rows


def by_state(rows: list[dict]) -> dict:
    """Mean and max |ΔNLL| of zeroed heads grouped by their state on the domain (dormant / between / active)."""
    out = {}
    for state in ("dormant", "between", "active"):
        vals = [abs(r["dnll_mean"]) for r in rows if r["kind"] == "head" and r["state"] == state]
        out[state] = {
            "n": len(vals),
            "mean_abs_dnll": float(np.mean(vals)) if vals else None,
            "max_abs_dnll": float(np.max(vals)) if vals else None,
        }
    return out


def head_rows(rows: list[dict]) -> list[dict]:
    """heads.csv: one line per (domain, head) that was zeroed or moved to the sink, in the order of `rows`: its
    sink score and state, ΔNLL ± s.e. with the head zeroed (`dnll_mean`, `dnll_se`, the names of ablation.csv)
    and with its attention moved onto key 0 (`dnll_sink_mean`, `dnll_sink_se`; empty where not run)."""
    out: dict[tuple[str, int, int], dict] = {}
    for r in rows:
        if r["kind"] not in ("head", "sink"):
            continue
        key = (r["domain"], int(r["layer"]), int(r["head"]))
        line = out.setdefault(
            key,
            {
                "domain": key[0],
                "layer": key[1],
                "head": key[2],
                "sink_score": r["sink_score"],
                "state": r["state"],
                "dnll_mean": "",
                "dnll_se": "",
                "dnll_sink_mean": "",
                "dnll_sink_se": "",
            },
        )
        prefix = "dnll" if r["kind"] == "head" else "dnll_sink"
        line[f"{prefix}_mean"], line[f"{prefix}_se"] = r["dnll_mean"], r["dnll_se"]
    return list(out.values())
