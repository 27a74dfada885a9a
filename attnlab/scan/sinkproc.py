"""The authors' sink-head procedure (spec extreme-tokens §14, R24), computed while the scan streams its windows.

For one window of T tokens and layer l with residual stream x^l (the layer's INPUT: stream l, 0 = embedding):

    candidates C_l = { i : ‖x^l_i‖ > ρ · median_t ‖x^l_t‖ }                               (ρ = `ratio`, 10)
    mean attention score  M[l,h,i] = (1/(T−i)) · Σ_{j≥i} A^{l,h}_{j,i}                   (queries at or after i)
    head h of layer l has a sink on token i  ⇔  i ∈ C_l  and  M[l,h,i] ≥ τ                (τ = `threshold`, 0.3)

Causal attention has A_{j,i} = 0 for j < i, so Σ_{j≥i} A_{j,i} is the column sum of A over all queries: an extra
statistic of the trace recorder (`ColumnSums`, `attnlab.tracing.extras`) adds Σ_j A[b,h,j,:] per query chunk into
a [B,L,H,T] block (no [T,T] pattern is kept) and the residual norms ‖x^l_t‖ into [B,R,T]. Over windows, a head
is a sink head of a domain when it has a sink (on any candidate) in at least half of the windows; that set is
compared with the key-0 classification (sink score ≥ 0.5). Sinks beyond token 0 are also counted per window (the
share of windows in which any head sinks on a token other than 0).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnlab.scan.analysis import DORMANT
from attnlab.tracing.extras import BatchShape, ExtraStatistic
from attnlab.tracing.format import Trace

RATIO = 10.0  # candidates: residual norm > 10 × the window's median (the authors' rule)
THRESHOLD = 0.3  # "large" mean attention score: our choice, an option of `attnlab scan`
MAJORITY = 0.5  # a head is a sink head of a domain when it has a sink in ≥ half of the windows


class ColumnSums(ExtraStatistic):
    """Per window, the column sums Σ_j A[l,h,j,i] of every layer's attention and the residual norms (an extra
    statistic of the trace recorder, `attnlab.tracing.extras`).

    `result()`: (cols [N,L,H,T] float32, Σ over queries j of A_{j,i}; norms [N,R,T] float32, ‖x^r_t‖ of residual
    stream r), over every batch recorded.

    With `ratio` the statistic asks the fused path only for the keys the procedure reads (`key_set`): key 0 and
    the candidates ‖x^l_i‖ > ratio × median of any window of the batch, exactly as `candidates` finds them; the
    column sums of other keys stay NaN. Without it, every key (from the column sums of `stats="full"`).
    """

    def __init__(self, ratio: float | None = None) -> None:
        self.ratio = ratio
        self.cols: list[torch.Tensor] = []
        self.norms: list[torch.Tensor] = []
        self._bcol: torch.Tensor | None = None
        self._bnorm: torch.Tensor | None = None

    def begin_batch(self, shape: BatchShape) -> None:
        """Fresh float64 accumulators [B,L,H,T] and [B,R,T] for the batch."""
        f64 = torch.float64
        self._bcol = torch.zeros(shape.batch, shape.layers, shape.heads, shape.seq_len, dtype=f64)
        if self.ratio is not None:
            self._bcol.fill_(float("nan"))
        self._bnorm = torch.zeros(shape.batch, shape.streams, shape.seq_len, dtype=f64)

    @torch.no_grad()
    def attention_rows(self, layer: int, q0: int, rows: torch.Tensor) -> None:
        """Add Σ over the chunk's queries of rows [B,H,C,K] (the chunk's visible keys; later keys have no weight)."""
        assert self._bcol is not None
        K = rows.shape[-1]
        if q0 == 0:  # this layer took the chunked path: every column is computed
            self._bcol[:, layer] = 0.0
        self._bcol[:, layer, :, :K] += rows.float().sum(2).double().cpu()  # [B,H,K]

    def key_set(self, layer: int) -> torch.Tensor | None:
        """Key 0 and the candidate tokens of layer `layer`'s input stream in any window of the batch (every key
        without a ratio)."""
        assert self._bnorm is not None
        if self.ratio is None:
            return torch.arange(self._bnorm.shape[-1])
        cand = np.asarray(candidates(self._bnorm[:, layer].float().numpy(), self.ratio).any(0))
        cand[0] = True
        return torch.from_numpy(np.flatnonzero(cand))

    def attention_columns(self, layer: int, keys: torch.Tensor, sums: torch.Tensor) -> None:
        """sums [B,H,J] = Σ_i A[:, :, i, keys] (fused path)."""
        assert self._bcol is not None
        self._bcol[:, layer][..., keys] = sums.double().cpu()

    @torch.no_grad()
    def residual(self, index: int, hidden: torch.Tensor) -> None:
        """‖x_t‖ of stream `index`, hidden [B,T,d]."""
        assert self._bnorm is not None
        self._bnorm[:, index] = hidden.detach().float().norm(dim=-1).double().cpu()

    def end_batch(self) -> None:
        """Keep the batch's sums as float32."""
        if self._bcol is not None and self._bnorm is not None:
            self.cols.append(self._bcol.float())
            self.norms.append(self._bnorm.float())
            self._bcol = self._bnorm = None

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """(cols [N,L,H,T], norms [N,R,T]) of every window recorded."""
        return torch.cat(self.cols).numpy(), torch.cat(self.norms).numpy()


def trace_windows_columns(
    model: Any, ids: torch.Tensor, batch_size: int = 1, desc: str = "scan", stats: str = "fast",
    ratio: float | None = RATIO, factors: dict | None = None, arch: Any = None,
) -> tuple[Trace, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """As `trace_windows` (ids [N,T]; `factors`: its cache), plus the per-window column sums [N,L,H,T] and residual
    norms [N,R,T].

    With `ratio` (the procedure's) and stats "fast", only key 0 and the candidates' columns are computed (the rest
    NaN); with stats "full" or "chunked" every column."""
    from attnlab.tracing.adapters.hf import trace_windows

    columns = ColumnSums(ratio if stats == "fast" else None)
    trace, nll = trace_windows(model, ids, batch_size, desc=desc, extras={"columns": columns}, stats=stats,
                                factors=factors, arch=arch)  # fmt: skip
    cols, norms = columns.result()
    return trace, nll, cols, norms


def mean_attention_score(cols: np.ndarray) -> np.ndarray:
    """M[...,i] = cols[...,i] / (T − i): the mean attention on key i over the queries j ≥ i. cols: [...,T]."""
    T = cols.shape[-1]
    return cols / (T - np.arange(T)).astype(cols.dtype)


def candidates(norms: np.ndarray, ratio: float = RATIO) -> np.ndarray:
    """Bool [...,T]: ‖x_i‖ > ratio × median_t ‖x_t‖ within each window. norms: [...,T]."""
    return norms > ratio * np.median(norms, axis=-1, keepdims=True)


@dataclass
class SinkProcedure:
    """The procedure's result on one domain (N windows, L layers, H heads, T tokens).

    score: [N,L,H,T] mean attention score M; cand: [N,L,T] candidate tokens (input stream of each layer);
    has_sink: [N,L,H,T] = cand ∧ (M ≥ threshold); norm_ratio: [N,L,T] ‖x^l_i‖ / median_t ‖x^l_t‖.
    """

    score: np.ndarray
    cand: np.ndarray
    has_sink: np.ndarray
    norm_ratio: np.ndarray
    ratio: float
    threshold: float

    @property
    def head_fraction(self) -> np.ndarray:
        """[L,H] share of windows in which the head has a sink on some candidate token."""
        return self.has_sink.any(-1).mean(0)

    @property
    def beyond0_fraction(self) -> np.ndarray:
        """[L,H] share of windows in which the head has a sink on a candidate token other than 0."""
        return self.has_sink[..., 1:].any(-1).mean(0)

    def sink_heads(self) -> np.ndarray:
        """[L,H] bool: a sink in at least `MAJORITY` of the windows."""
        return self.head_fraction >= MAJORITY


def sink_procedure(
    cols: np.ndarray, norms: np.ndarray, ratio: float = RATIO, threshold: float = THRESHOLD
) -> SinkProcedure:
    """The procedure (module docstring) from cols [N,L,H,T] and residual norms [N,R,T] (R ≥ L: stream l feeds
    layer l)."""
    L = cols.shape[1]
    x = norms[:, :L]
    score = mean_attention_score(cols)
    cand = candidates(x, ratio)
    ratio_arr = x / np.median(x, axis=-1, keepdims=True)
    return SinkProcedure(score, cand, cand[:, :, None, :] & (score >= threshold), ratio_arr, ratio, threshold)


def agreement(authors: np.ndarray, key0: np.ndarray) -> dict[str, Any]:
    """Confusion counts and Jaccard index of two [L,H] bool head sets (authors' procedure vs key-0 score)."""
    both = int((authors & key0).sum())
    union = int((authors | key0).sum())
    return {
        "both": both,
        "authors_only": int((authors & ~key0).sum()),
        "key0_only": int((~authors & key0).sum()),
        "neither": int((~authors & ~key0).sum()),
        "jaccard": both / union if union else float("nan"),
    }


def _decode(tokenizer: Any, tid: int) -> str:
    return tokenizer.decode([int(tid)]) if tokenizer is not None else str(int(tid))


def candidate_rows(domain: str, proc: SinkProcedure, ids: np.ndarray, tokenizer: Any = None) -> list[dict]:
    """sink_candidates.csv: one row per (window, layer, candidate token) with its text, norm ratio and the number
    of heads that have a sink on it. ids: [N,T]."""
    rows = []
    for n, l, i in zip(*np.nonzero(proc.cand), strict=True):
        rows.append(
            {
                "domain": domain,
                "sample": int(n),
                "layer": int(l),
                "pos": int(i),
                "token_id": int(ids[n, i]),
                "token": _decode(tokenizer, ids[n, i]),
                "norm_ratio": float(proc.norm_ratio[n, l, i]),
                "sink_heads": int(proc.has_sink[n, l, :, i].sum()),
                "max_score": float(proc.score[n, l, :, i].max()),
            }
        )
    return rows


def top_tokens(texts: list[str], k: int = 5) -> str:
    """ "' the'×12, ','×3": the k most frequent decoded tokens."""
    return ", ".join(f"{t!r}×{c}" for t, c in Counter(texts).most_common(k))


def top_ratio_tokens(ratio: np.ndarray, ids: np.ndarray, tokenizer: Any = None, k: int = 3) -> str:
    """ "' the' 12.2, ',' 9.1": the k distinct tokens with the largest norm ratios (ratio, ids: [N,T'])."""
    best: dict[str, float] = {}
    for flat in np.argsort(-ratio, axis=None)[: 50 * k]:
        n, i = np.unravel_index(int(flat), ratio.shape)
        text = _decode(tokenizer, ids[n, i])
        best.setdefault(text, float(ratio[n, i]))
        if len(best) == k:
            break
    return ", ".join(f"{t!r} {v:.1f}" for t, v in best.items())


def layer_rows(domain: str, proc: SinkProcedure, ids: np.ndarray, tokenizer: Any = None) -> list[dict]:
    """sink_layers.csv: per layer, how often token 0 is a candidate (and its median norm ratio), the candidates
    beyond token 0 (count per window, most frequent texts, those that some head sinks on, the largest norm ratio
    of any token but 0 and the texts of the largest three) and the heads with sinks."""
    N, L, H, T = proc.score.shape
    rows = []
    for l in range(L):
        n_i = np.nonzero(proc.cand[:, l, 1:])
        texts = [_decode(tokenizer, ids[n, i + 1]) for n, i in zip(*n_i, strict=True)]
        sunk = np.nonzero(proc.has_sink[:, l, :, 1:].any(1))
        sunk_texts = [_decode(tokenizer, ids[n, i + 1]) for n, i in zip(*sunk, strict=True)]
        r = proc.norm_ratio[:, l, 1:]
        rows.append(
            {
                "domain": domain,
                "layer": l,
                "token0_candidate_share": float(proc.cand[:, l, 0].mean()),
                "beyond0_candidates_per_window": float(proc.cand[:, l, 1:].sum(-1).mean()),
                "beyond0_tokens": top_tokens(texts),
                "beyond0_sunk_tokens": top_tokens(sunk_texts),
                "token0_norm_ratio": float(np.median(proc.norm_ratio[:, l, 0])),
                "beyond0_max_norm_ratio": float(r.max()),
                "beyond0_top_ratio_tokens": top_ratio_tokens(r, ids[:, 1:], tokenizer),
                "sink_heads": int(proc.sink_heads()[l].sum()),
                "sink_heads_beyond0": int((proc.beyond0_fraction[l] >= MAJORITY).sum()),
            }
        )
    return rows


def head_rows(domain: str, proc: SinkProcedure, key0: np.ndarray) -> list[dict]:
    """sink_heads_authors.csv: per head, the procedure's sink shares beside the key-0 sink score (key0: [L,H])."""
    authors = proc.sink_heads()
    L, H = key0.shape
    return [
        {
            "domain": domain,
            "layer": l,
            "head": h,
            "sink_share": float(proc.head_fraction[l, h]),
            "sink_share_beyond0": float(proc.beyond0_fraction[l, h]),
            "score_token0": float(proc.score[:, l, h, 0].mean()),
            "key0_sink_score": float(key0[l, h]),
            "authors_sink": bool(authors[l, h]),
            "key0_sink": bool(key0[l, h] >= DORMANT),
        }
        for l in range(L)
        for h in range(H)
    ]


def domain_summary(
    domain: str, proc: SinkProcedure, key0: np.ndarray, layers: list[dict], ids: np.ndarray, tokenizer: Any = None
) -> dict[str, Any]:
    """The procedure's headline numbers on one domain: agreement with the key-0 classification (sink score ≥
    DORMANT), the share of windows in which some head of some layer has a sink on a token other than 0 (and
    those tokens, with the layers), the layers whose windows mostly hold a candidate beyond token 0."""
    beyond = [r for r in layers if r["beyond0_candidates_per_window"] >= MAJORITY]
    sunk: np.ndarray = np.asarray(proc.has_sink[..., 1:].any(2))  # [N,L,T-1]
    n, l, i = np.nonzero(sunk)
    return {
        "domain": domain,
        "ratio": proc.ratio,
        "threshold": proc.threshold,
        "authors_sink_heads": int(proc.sink_heads().sum()),
        "key0_sink_heads": int((key0 >= DORMANT).sum()),
        "authors_sink_heads_beyond0": int((proc.beyond0_fraction >= MAJORITY).sum()),
        **agreement(proc.sink_heads(), key0 >= DORMANT),
        "windows_with_beyond0_sink": float(sunk.reshape(sunk.shape[0], -1).any(-1).mean()),
        "beyond0_sink_layers": sorted({int(x) for x in l}),
        "beyond0_sunk_tokens": top_tokens([_decode(tokenizer, ids[a, b + 1]) for a, b in zip(n, i, strict=True)]),
        "layers_with_beyond0_candidates": [r["layer"] for r in beyond],
        "beyond0_tokens": "; ".join(f"L{r['layer']}: {r['beyond0_tokens']}" for r in beyond[:12]),
    }
