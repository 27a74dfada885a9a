"""Tables of `bb train` runs, built from the saved metrics records (metrics.jsonl) only.

`run.py` returns them as the run's tables, `report.py` shows them and `demo.py` sums the demo's runs up with them;
a module of its own so that none of those imports another for them.
"""

from __future__ import annotations

from attnlab.bb.metrics import PER_HEAD, PER_LAYER, metric, record_shape

SUMMARY_KEYS = (
    "attn_sink",
    "delta_logit",
    "value_norm_bos",
    "value_norm_others",
    "resid_norm_bos",
    "resid_norm_others",
    "excess_risk_backcopy",
    "excess_risk_bigram",
    "loss",
)


def metrics_table(records: list[dict]) -> list[dict]:
    """One row per snapshot. A 1-layer 1-head run keeps the metric names; otherwise per-head metrics become
    columns `name[l.h]` and per-layer ones `name[l]`."""
    rows = []
    for r in records:
        L, H = record_shape(r)
        row: dict = {"step": r["step"]}
        for name in r:
            if name == "step":
                continue
            if (L, H) == (1, 1) or name not in PER_HEAD + PER_LAYER:
                row[name] = metric(r, name)
            elif name in PER_LAYER:
                row.update({f"{name}[{l}]": metric(r, name, l) for l in range(L)})
            else:
                row.update({f"{name}[{l}.{h}]": metric(r, name, l, h) for l in range(L) for h in range(H)})
        rows.append(row)
    return rows


def final_summary(records: list[dict]) -> dict:
    """The SUMMARY_KEYS of the last record (layer 0, head 0); empty without records."""
    return {k: metric(records[-1], k) for k in SUMMARY_KEYS} if records else {}


def summary_rows(metrics: list[dict], steps: tuple[int, ...] = (0, 100, 200, 400, 1000)) -> list[dict]:
    """Metrics (layer 0, head 0) at a few steps and at the end."""
    by_step = {r["step"]: r for r in metrics}
    chosen = [s for s in steps if s in by_step] + ([metrics[-1]["step"]] if metrics else [])
    return [{"step": s, **{k: metric(by_step[s], k) for k in SUMMARY_KEYS}} for s in dict.fromkeys(chosen)]
