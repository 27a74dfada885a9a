"""Secondary sinks in a scan (issue 41, spec extreme-tokens §13.14): sinks.csv, sink_levels.csv and the summary's
`secondary_sinks`, from each domain's trace (`Trace.secondary_sinks`, `attnlab.tracing.sinks`).

A key j ≥ 1 is a sink of head (l, h) in a window when M_j = (1/(T−j)) Σ_{i≥j} A_ij ≥ τ = 0.3 (seen by ≥ 32 queries);
sinks.csv has one row per sink token (domain, window, position): its text, first layer, lifetime, heads, scores and
every layer's MLP output norm and cosine with position 0's residual entering the block; sink_levels.csv one row per
(token, layer) it is a sink in. The summary counts, per domain, the windows with a sink in a layer ≥ FROM_LAYER
(R26's reading) and the most frequent sink tokens. Only a scan with full-row statistics (`--stats full` or
`chunked`) has them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from attnlab.tracing.format import Trace

FROM_LAYER = 2  # R26: "a sink at some j ≥ 1 (M_j ≥ 0.3 in some head of layers ≥ 2)"
TOP_TOKENS = 8


def _text(tokenizer: Any, token: int) -> str:
    return tokenizer.decode([int(token)]) if tokenizer is not None and token >= 0 else ""


def _rows(domain: str, table: Any, tokenizer: Any) -> list[dict[str, Any]]:
    """A sink table's rows with the domain first and each token's text beside it (empty when there is none)."""
    if table is None or not len(table):
        return []
    table.insert(0, "domain", domain)
    table.insert(4, "text", [_text(tokenizer, t) for t in table["token"]])
    return table.to_dict("records")


def sink_rows(domain: str, trace: Trace, tokenizer: Any) -> list[dict[str, Any]]:
    """The rows of sinks.csv for one domain (empty when the trace has no sink record)."""
    return _rows(domain, trace.secondary_sinks, tokenizer)


def level_rows(domain: str, trace: Trace, tokenizer: Any) -> list[dict[str, Any]]:
    """The rows of sink_levels.csv for one domain: (window, position, layer) with its score and heads."""
    return _rows(domain, trace.sink_levels, tokenizer)


def window_flags(levels: list[dict[str, Any]], n_windows: int, from_layer: int = FROM_LAYER) -> np.ndarray:
    """[n_windows] bool: the window has a sink (j ≥ 1) in some head of a layer ≥ `from_layer`. levels: one domain's
    sink_levels rows."""
    flags = np.zeros(n_windows, dtype=bool)
    for r in levels:
        if int(r["layer"]) >= from_layer:
            flags[int(r["sample"])] = True
    return flags


def domain_summary(domain: str, trace: Trace, levels: list[dict[str, Any]], tokens: list[dict[str, Any]]) -> dict:
    """The summary's entry for one domain: windows, windows with a sink in layers ≥ FROM_LAYER and their share,
    sink tokens, the layers with sinks, and the most frequent sink tokens' texts."""
    n = int(trace.sink_score_per_sample.shape[0])
    if trace.sink_record is None:
        return {"domain": domain, "computed": False}
    flags = window_flags(levels, n)
    texts = Counter(str(r["text"]) for r in tokens if int(r["first_layer"]) >= FROM_LAYER)
    layers = sorted({int(r["layer"]) for r in levels})
    return {
        "domain": domain,
        "computed": True,
        "tau": trace.sink_record.tau,
        "min_queries": trace.sink_record.min_queries,
        "windows": n,
        "windows_with_sink": int(flags.sum()),
        "share_windows_with_sink": float(flags.mean()) if n else float("nan"),
        "sink_tokens": len(tokens),
        "sink_layers": " ".join(map(str, layers)),
        "top_tokens": [f"{t!r}×{c}" for t, c in texts.most_common(TOP_TOKENS)],
    }


def layer_table(levels: list[dict[str, Any]], per_layer: int = TOP_TOKENS) -> list[dict[str, Any]]:
    """The report's sink levels: per domain and layer, the number of sink tokens and the strongest ones as
    'text'@pos=score (up to `per_layer`)."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in levels:
        groups.setdefault((str(r["domain"]), int(r["layer"])), []).append(r)
    out = []
    for (domain, layer), rows in sorted(groups.items()):
        rows = sorted(rows, key=lambda r: -float(r["score"]))
        top = ", ".join(f"{str(r['text'])!r}@{int(r['pos'])}={float(r['score']):.2f}" for r in rows[:per_layer])
        out.append({"domain": domain, "layer": layer, "sink_tokens": len(rows),
                    "windows": len({int(r["sample"]) for r in rows}), "strongest": top})  # fmt: skip
    return out
