"""The scan's computation: per-head and per-layer tables from domain traces (spec extreme-tokens §10.4).

Thresholds (spec §13.7, kept from the paper's protocol as the spec states them):
- a head is *dormant* (a sink) on a domain if its sink score s_h ≥ DORMANT (0.5) and *active* if s_h < ACTIVE (0.3);
- classes over the scanned domains: `sink-all` (dormant on every domain), `active-all` (active on every domain),
  `active-dormant` (dormant on one domain and active on another), `mixed` (anything else);
- Sink_1^ε (Gu et al.): percentage of (sample, layer, head) triples whose mean attention score of key 0,
  ᾱ_0 = (1/T) Σ_{i≥0} A_i0, exceeds ε = 0.3.
"""

from __future__ import annotations

import numpy as np

from attnlab.hf.heads import ACTIVE, DORMANT, state_of  # the head states, shared with `ablate`
from attnlab.tracing.format import Trace, massive_records

SINK_EPS = 0.3


def sink_k_eps(trace: Trace, eps: float = SINK_EPS) -> float:
    """Sink_1^ε in percent: share of (sample, layer, head) with ᾱ_0 > ε."""
    return float(100.0 * (trace.key0_col_mean_per_sample > eps).mean())


def head_rows(domain: str, trace: Trace) -> list[dict]:
    """One row per (layer, head): sink score, ᾱ_0, row entropy, value-norm ratio, per-domain state, and the mass on
    the learned sink logit (`learned_sink_mass`, models with learned sinks only) beside the key-0 sink score."""
    s = trace.sink_score()
    a0 = trace.mean_attn_score_key0()
    vr = trace.value_norm_ratio()
    frac = (trace.key0_col_mean_per_sample > SINK_EPS).mean(0)
    dl = np.nanmean(trace.dlogit_by_query[..., 2:], axis=-1) if trace.seq_len > 2 else np.full(s.shape, np.nan)
    learned = trace.learned_sink_mass()  # None without learned sink logits: no column (tables stay as they were)
    rows = []
    for l in range(trace.n_layers):
        for h in range(trace.n_heads):
            state = state_of(s[l, h])
            rows.append(
                {
                    "domain": domain,
                    "layer": l,
                    "head": h,
                    "sink_score": float(s[l, h]),
                    "mean_attn_score_key0": float(a0[l, h]),
                    "row_entropy": float(trace.row_entropy[l, h]),
                    "value_norm_ratio": float(vr[l, h]),
                    "sink_frac_eps": float(frac[l, h]),
                    "dlogit_mean": float(dl[l, h]),
                    "state": state,
                }
            )
            if learned is not None:
                rows[-1]["learned_sink_mass"] = float(learned[l, h])
    return rows


def layer_rows(domain: str, trace: Trace, ids: np.ndarray | None = None) -> list[dict]:
    """One row per residual stream: layer −1 is the embedding output, layer l the output of block l."""
    ratio = trace.resid_norm_ratio()
    vr = np.median(trace.value_norm_ratio(), axis=1)
    rows = []
    massive = massive_records(trace.massive)
    for r in range(len(ratio)):
        hits = [m for m in massive if m["layer"] == r]
        top = max(hits, key=lambda m: abs(m["value"])) if hits else None
        rows.append(
            {
                "domain": domain,
                "layer": r - 1,
                "resid_norm_ratio": float(ratio[r]),
                "resid_norm_token0": float(trace.resid_norm[r, 0]),
                "resid_norm_median_other": float(np.median(trace.resid_norm[r, 1:])),
                "max_abs": float(trace.max_abs[r]),
                "max_pos": int(trace.max_pos[r]),
                "max_dim": int(trace.max_dim[r]),
                "median_abs": float(trace.median_abs[r]),
                "value_norm_ratio_median": float(vr[r - 1]) if r >= 1 else float("nan"),
                "n_massive": len(hits),
                "massive_top": (f"pos {top['pos']} dim {top['dim']} value {top['value']:.1f}" if top else ""),
            }
        )
    return rows


def massive_rows(domain: str, trace: Trace, ids: np.ndarray, tokenizer=None) -> list[dict]:
    """Massive activations (|h| > 100 and > 1000 × the layer median): layer, sample, token, dimension, value."""
    rows = []
    for m in sorted(massive_records(trace.massive), key=lambda m: (m["layer"], -abs(m["value"]))):
        tid = int(ids[m["sample"], m["pos"]])
        rows.append(
            {
                "domain": domain,
                "layer": m["layer"] - 1,
                "sample": m["sample"],
                "pos": m["pos"],
                "token_id": tid,
                "token": tokenizer.decode([tid]) if tokenizer is not None else "",
                "dim": m["dim"],
                "value": m["value"],
                "median_abs": m["median_abs"],
            }
        )
    return rows


def classify_heads(sink: dict[str, np.ndarray]) -> list[dict]:
    """sink: domain -> [L,H] sink scores. One row per head with its class across domains (module docstring)."""
    domains = list(sink)
    S = np.stack([sink[d] for d in domains])  # [D,L,H]
    L, H = S.shape[1:]
    rows = []
    for l in range(L):
        for h in range(H):
            v = S[:, l, h]
            dormant = [d for d, x in zip(domains, v) if x >= DORMANT]
            active = [d for d, x in zip(domains, v) if x < ACTIVE]
            if len(dormant) == len(domains):
                cls = "sink-all"
            elif len(active) == len(domains):
                cls = "active-all"
            elif dormant and active:
                cls = "active-dormant"
            else:
                cls = "mixed"
            row = {"layer": l, "head": h, "class": cls, "dormant_on": "+".join(dormant), "active_on": "+".join(active)}
            row.update({f"sink_{d}": float(x) for d, x in zip(domains, v)})
            rows.append(row)
    return rows


def class_counts(classes: list[dict]) -> dict[str, int]:
    out = {"sink-all": 0, "active-all": 0, "active-dormant": 0, "mixed": 0}
    for r in classes:
        out[r["class"]] += 1
    return out


def pair_shift(sink: dict[str, np.ndarray], a: str, b: str) -> list[dict]:
    """Heads dormant on domain b and active on domain a (s ≥ 0.5 on b, < 0.3 on a), largest shift first."""
    sa, sb = sink[a], sink[b]
    idx = np.argwhere((sb >= DORMANT) & (sa < ACTIVE))
    rows = [
        {
            "layer": int(l),
            "head": int(h),
            f"sink_{a}": float(sa[l, h]),
            f"sink_{b}": float(sb[l, h]),
            "shift": float(sb[l, h] - sa[l, h]),
        }
        for l, h in idx
    ]
    return sorted(rows, key=lambda r: -r["shift"])


def domain_summary(domain: str, trace: Trace, nll: np.ndarray) -> dict:
    """Headline numbers for one domain (percentages of heads above the thresholds, Sink_1^ε, perplexity, and the
    mean learned-sink mass for models with learned sink logits)."""
    s = trace.sink_score()
    L = trace.n_layers
    late = slice(L * 12 // 30, L) if L >= 10 else slice(0, L)
    out = {
        "domain": domain,
        "samples": int(trace.sink_score_per_sample.shape[0]),
        "nll": float(nll.mean()),
        "perplexity": float(np.exp(nll.mean())),
        "sink_1_eps_percent": sink_k_eps(trace),
        "heads_above_0.5_percent": float(100 * (s >= DORMANT).mean()),
        "heads_above_0.3_percent": float(100 * (s > ACTIVE).mean()),
        "late_layers": f"{late.start}-{late.stop - 1}",
        "late_heads_above_0.3_percent": float(100 * (s[late] > ACTIVE).mean()),
        "mean_sink_score": float(s.mean()),
    }
    learned = trace.learned_sink_mass()
    if learned is not None:  # models with learned sink logits only: the same phenomenon, made explicit
        out["mean_learned_sink_mass"] = float(learned.mean())
    return out
