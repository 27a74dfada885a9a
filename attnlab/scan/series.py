"""Checkpoint series: one scan per checkpoint, and one table across them (issue 9; the paper follows OLMo
checkpoints through training).

A series is a list of (model, revision) pairs: local checkpoint folders (`--model DIR1 --model DIR2`, or one folder
whose sub-folders are checkpoints), or one hub model at several revisions (`--revision R1 --revision R2`). Each
checkpoint is scanned into `checkpoints/<k>-<label>/` (a complete scan folder) and `series.csv` gets one row per
(checkpoint, domain) with its training step (the number after "step" in the label, else its last number, else
its index k; the series and its labels and steps: `attnlab.hf.checkpoints`):

| column | meaning |
|---|---|
| mean_sink_score | mean over layers and heads of the sink score s_h (mean A_i0 over queries 1..T−1) |
| heads_above_0.5_percent | share of heads with s_h ≥ 0.5 (dormant) |
| max_abs, max_abs_layer | largest |x| in any residual stream (massive activation), and its stream (−1 = embedding) |
| massive_ratio | max over streams of max|x| / median|x| |
| resid_norm_ratio_max | max over streams of ‖x_0‖ / median_{t≥1} ‖x_t‖ |
| value_norm_ratio_median | median over layers and heads of ‖W_O^h v_0‖ / median_t ‖W_O^h v_t‖ |
| learned_sink_mass_mean | mean learned-sink mass (models with learned sink logits only, else empty) |
| nll | mean next-token NLL |

`sink_dynamics.csv` (R25, `dynamics_rows`) follows the last checkpoint's sink heads through the series: their
Attn⟨s⟩, the value-norm ratio of token 0 at those heads and the residual-norm ratio of token 0;
`attnlab.core.curves.onset` gives the step at which each has made half of its change.
"""

from __future__ import annotations

import numpy as np

from attnlab.tracing.format import Trace


def series_rows(
    label: str, step: int, model: str, revision: str | None, traces: dict[str, Trace], nll: dict[str, float]
) -> list[dict]:
    """One row per domain of one checkpoint (module docstring)."""
    rows = []
    for d, tr in traces.items():
        s = tr.sink_score()
        learned = tr.learned_sink_mass()
        ratio = np.where(tr.median_abs > 0, tr.max_abs / np.maximum(tr.median_abs, 1e-300), np.nan)
        rows.append(
            {
                "checkpoint": label,
                "step": step,
                "model": model,
                "revision": revision or "",
                "domain": d,
                "nll": float(nll[d]),
                "mean_sink_score": float(s.mean()),
                "heads_above_0.5_percent": float(100 * (s >= 0.5).mean()),
                "max_abs": float(tr.max_abs.max()),
                "max_abs_layer": int(tr.max_abs.argmax()) - 1,
                "massive_ratio": float(np.nanmax(ratio)),
                "resid_norm_ratio_max": float(np.max(tr.resid_norm_ratio())),
                "value_norm_ratio_median": float(np.median(tr.value_norm_ratio())),
                "learned_sink_mass_mean": float(learned.mean()) if learned is not None else "",
            }
        )
    return rows


def sink_heads_of(trace: Trace) -> list[tuple[int, int]]:
    """The sink heads of a (final) checkpoint: sink score ≥ DORMANT (0.5), else the single highest head."""
    from attnlab.scan.analysis import DORMANT

    s = trace.sink_score()
    heads = [(int(l), int(h)) for l, h in zip(*np.nonzero(s >= DORMANT), strict=True)]
    return heads or [tuple(int(i) for i in np.unravel_index(int(np.argmax(s)), s.shape))]  # type: ignore[list-item]


def dynamics_rows(domain: str, points: list[tuple[str, int, Trace]]) -> list[dict]:
    """sink_dynamics.csv (R25): per checkpoint (label, step, trace) of one domain, with the sink heads H_s taken
    at the LAST checkpoint:

    attn_sink = mean_{h∈H_s} s_h (Attn⟨s⟩, attention of queries 1..T−1 to token 0);
    value_norm_ratio = mean_{h∈H_s} ‖W_O^h v_0‖ / median_{i≥1} ‖W_O^h v_i‖ (the value drain of token 0);
    resid_norm_ratio = max over the residual streams between blocks (after block 0 .. before the last block; the
    output of the only block for one layer) of ‖x_0‖ / median_{i≥1} ‖x_i‖ (the residual peak);
    resid_norm_ratio_sink_input = the same ratio at the input streams of the sink heads' layers, averaged."""
    heads = sink_heads_of(points[-1][2])
    ls, hs = [l for l, _ in heads], [h for _, h in heads]
    rows = []
    for label, step, tr in points:
        r = tr.resid_norm_ratio()  # [L+1]: embedding, after each block
        L = tr.attn_key0_by_query.shape[0]
        inner = r[1:L] if L >= 2 else r[1:2]
        rows.append(
            {
                "checkpoint": label,
                "step": step,
                "domain": domain,
                "sink_heads": " ".join(f"{l}.{h}" for l, h in heads),
                "attn_sink": float(tr.sink_score()[ls, hs].mean()),
                "value_norm_ratio": float(tr.value_norm_ratio()[ls, hs].mean()),
                "resid_norm_ratio": float(inner.max()),
                "resid_norm_ratio_sink_input": float(r[sorted(set(ls))].mean()),
            }
        )
    return rows
