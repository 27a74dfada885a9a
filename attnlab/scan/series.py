"""Checkpoint series: one scan per checkpoint, and one table across them (issue 9; the paper follows OLMo
checkpoints through training).

A series is a list of (model, revision) pairs: local checkpoint folders (`--model DIR1 --model DIR2`, or one folder
whose sub-folders are checkpoints), or one hub model at several revisions (`--revision R1 --revision R2`). Each
checkpoint is scanned into `checkpoints/<k>-<label>/` (a complete scan folder) and `series.csv` gets one row per
(checkpoint, domain) with its training step (the number after "step" in the label, else its last number, else
its index k):

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
Attn⟨s⟩, the value-norm ratio of token 0 at those heads and the residual-norm ratio of token 0; `onset` gives the
step at which each has made half of its change.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from attnlab.errors import InputError
from attnlab.tracing.format import Trace


def checkpoint_label(model: str, revision: str | None) -> str:
    """A short name for one checkpoint: the revision, else the folder's (or hub id's) last component."""
    return revision if revision else Path(model.rstrip("/")).name or model


def checkpoint_step(label: str, index: int) -> int:
    """The training step of a checkpoint from its label: 'step1000-tokens4B' -> 1000, 'ckpt-30' -> 30, else index."""
    m = re.search(r"step[-_]?(\d+)", label, re.IGNORECASE)
    if m:
        return int(m.group(1))
    nums = re.findall(r"\d+", label)
    return int(nums[-1]) if nums else index


def checkpoints_in_folder(folder: str | Path) -> list[str]:
    """The checkpoint sub-folders (each with a config.json) of a folder that has none itself, by training step."""
    root = Path(folder).expanduser()
    subs = [p for p in root.iterdir() if p.is_dir() and (p / "config.json").is_file()] if root.is_dir() else []
    if not subs:
        raise InputError(f"{root} holds no checkpoint folders (sub-folders with a config.json)")
    return [str(p) for p in sorted(subs, key=lambda p: (checkpoint_step(p.name, 0), p.name))]


def expand_series(models: list[str], revisions: list[str]) -> tuple[tuple[str, str | None], ...]:
    """(model, revision) pairs of a series, or () for a single checkpoint.

    One model and several revisions: that model at each revision. Several models: each at its default revision
    (at most one --revision, applied to all). One local folder without a config.json: its checkpoint sub-folders."""
    if any(not str(m).strip() for m in models):  # Path("") is ".": it would read this folder as a series
        raise InputError("--model is an empty name; give 'smollm2', a local model folder or a hub id (gpt2, org/name)")
    if len(models) > 1 and len(revisions) > 1:
        raise InputError("a checkpoint series takes several --model or several --revision, not both")
    if len(revisions) > 1:
        return tuple((models[0], r) for r in revisions)
    rev = revisions[0] if revisions else None
    if len(models) == 1:
        path = Path(models[0]).expanduser()
        if path.is_dir() and not (path / "config.json").is_file():
            return tuple((m, None) for m in checkpoints_in_folder(path))
        return ()
    if len(set(models)) != len(models):
        raise InputError(f"--model: {models} repeats a checkpoint")
    return tuple((m, rev) for m in models)


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


def onset(steps: list[int], values: list[float], rising: bool, fraction: float = 0.5) -> int | None:
    """The first step at which a metric has made `fraction` (half) of its total change, the change from the first
    checkpoint to its extreme in the claimed direction (max when `rising`, else min); None when it never moves
    that way."""
    v = np.asarray(values, dtype=float)
    total = (v.max() if rising else v.min()) - v[0]
    if total == 0 or (total < 0) == rising:
        return None
    progress = (v - v[0]) / total
    return int(steps[int(np.argmax(progress >= fraction))])
