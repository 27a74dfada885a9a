"""Padded batches (issue 40 item 4): sequences of different real lengths traced in one call.

A batch is token ids [N, P] with a 0/1 `attention_mask` [N, P] as transformers takes it (left, right or both-sided
padding; the real tokens of a row must be contiguous), or strings of different lengths.

Decision: padding is stripped, never masked. Each sequence's real tokens are cut out, the sequences are grouped by
real length, and each group runs as an ordinary unpadded batch through the unchanged adapters and fused kernels;
the groups' traces are then merged in input order (`merge_traces`). A sequence's statistics are therefore those of
the same tokens traced alone (exact by construction: the same kernels on the same tokens, only the batch around
them differs), and position 0 is each sequence's first real token. The cost: one forward per distinct length per
`batch_size` sequences instead of one per `batch_size` (a batch of N different lengths runs N forwards of one
sequence). Passing the mask into the attention would keep one forward per batch, but every family's mask code,
the fused kernel, the learned sinks, sliding windows and the per-position statistics would each have to skip pads
correctly; stripping has no such risk.

What the merged `Trace` holds (P_max = the longest real length; N sequences in input order):
- per-sequence arrays (`sink_score_per_sample`, `key0_col_mean_per_sample`) are each sequence's own, in input order;
- per-position means [.., P_max] (`attn_key0_by_query`, `logit_key0`, `logit_rest`, `dlogit_by_query`,
  `value_norm`, `resid_norm`, `learned_sink_by_query`) are, at position t, the mean over the sequences that have a
  position t (real length > t);
- `attn_col_mean` ᾱ_j is the mean of A_ij over every (sequence, query i ≥ j) pair, and `row_entropy` the mean over
  every non-empty row i ≥ 1 of every sequence; the by-token means are weighted by their counts, which add;
- `median_abs` is the mean over the forwards run of each forward's median |x|, as in an unpadded call;
- `max_abs` / `max_pos` / `max_dim` and the `massive` entries are over every sequence (`sample` = the input row,
  `pos` counted from that row's first real token; the largest `MAX_MASSIVE_ENTRIES` per stream);
- kept patterns are [N, P_max, P_max] float32, NaN outside each sequence's own [T_i, T_i] block.
When every sequence has the same real length the merge is one group and the Trace equals an unpadded call's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from attnlab.errors import InputError
from attnlab.tracing.format import Trace, massive_records
from attnlab.tracing.recorder import MAX_MASSIVE_ENTRIES

PER_POSITION = ("attn_key0_by_query", "logit_key0", "logit_rest", "dlogit_by_query", "value_norm", "resid_norm")


@dataclass(frozen=True)
class Batch:
    """Token ids [N, P] as given (pads included) with each row's first real position and real length."""

    ids: torch.Tensor
    starts: tuple[int, ...]
    lengths: tuple[int, ...]

    @property
    def padded(self) -> bool:
        """True when some row has pads (its real length is below P)."""
        return any(n != self.ids.shape[1] for n in self.lengths)

    def sequence(self, row: int) -> torch.Tensor:
        """[T_row] the real tokens of `row`."""
        return self.ids[row, self.starts[row] : self.starts[row] + self.lengths[row]]

    def groups(self) -> list[tuple[int, list[int]]]:
        """[(real length, rows of that length)], lengths in the order first met, rows in input order."""
        found: dict[int, list[int]] = {}
        for row, n in enumerate(self.lengths):
            found.setdefault(n, []).append(row)
        return list(found.items())


def _mask_array(mask: Any) -> np.ndarray:
    """The mask as a numpy array, refused in one line when it is not numbers."""
    try:
        arr = mask.detach().cpu().numpy() if isinstance(mask, torch.Tensor) else np.asarray(mask)
    except (TypeError, ValueError) as exc:
        raise InputError(f"attention_mask must be a [batch, pos] array of 0/1: {exc}") from None
    if arr.dtype.kind not in "biuf":
        raise InputError(f"attention_mask must be a [batch, pos] array of 0/1, got dtype {arr.dtype}")
    return arr


def from_mask(ids: torch.Tensor, mask: Any) -> Batch:
    """The `Batch` of ids [N, P] under a transformers `attention_mask` [N, P] (1 = token, 0 = pad; None = no pads),
    refused in one line when the mask is not 0/1, not ids' shape, or a row's real tokens are none or not contiguous."""
    N, P = ids.shape
    if mask is None:
        return Batch(ids, (0,) * N, (P,) * N)
    arr = _mask_array(mask)
    arr = arr[None] if arr.ndim == 1 else arr
    if arr.shape != (N, P):
        raise InputError(f"attention_mask has shape {tuple(arr.shape)}, the token ids {(N, P)}: they must agree")
    bad = ~np.isin(arr, (0, 1))
    if bad.any():
        raise InputError(f"attention_mask must hold only 0 and 1, got {arr[bad].flat[0]!r}")
    starts, lengths = [], []
    for row, real in enumerate(arr.astype(bool)):
        where = np.flatnonzero(real)
        if where.size == 0:
            raise InputError(f"attention_mask row {row} has no real token")
        if where[-1] - where[0] + 1 != where.size:
            raise InputError(f"attention_mask row {row} has a hole: its real tokens must be contiguous (padding on "
                             "the left and/or right only)")  # fmt: skip
        starts.append(int(where[0]))
        lengths.append(int(where.size))
    return Batch(ids, tuple(starts), tuple(lengths))


def from_rows(rows: list[list[int]], pad_id: int, side: str) -> Batch:
    """The `Batch` of token lists of different lengths, padded with `pad_id` on `side` ("left" or "right")."""
    P = max(len(r) for r in rows)
    pads = [[pad_id] * (P - len(r)) for r in rows]
    padded = [p + r if side == "left" else r + p for r, p in zip(rows, pads)]
    starts = tuple(P - len(r) if side == "left" else 0 for r in rows)
    return Batch(torch.tensor(padded, dtype=torch.long), starts, tuple(len(r) for r in rows))


def run_groups(
    run: Callable[[torch.Tensor, list[int]], tuple[Trace, torch.Tensor | None]],
    batch: Batch,
    batch_size: int,
    kept: dict[str, list],
) -> tuple[Trace, torch.Tensor | None, dict[str, Any]]:
    """Trace `batch` one real length at a time: `run(ids [n, T], rows) -> (Trace, logits [n, T, V] or None)` for each
    group (`rows`: the input rows of its n sequences).

    Returns the merged `Trace`, the logits [N, P, V] in the layout of `batch.ids` (`padded_logits`; None where the
    runs kept none) and, for each
    cached point in `kept` (the lists the cache hooks append one [b, ...] tensor to per forward, or under grad=True
    a tuple of its b rows, each in autograd's graph), the activations in input order (`join_rows`; rows in the graph
    stay a list: stacked, they would be a copy that no gradient reaches). A `grad_stats` dict the groups' traces
    carry ({name: [n, ...]}) is joined alike."""
    groups = batch.groups()
    traces, logits = [], [torch.empty(0)] * len(batch.lengths)
    kept_logits = True
    cached: dict[str, list] = {p: [None] * len(batch.lengths) for p in kept}
    for _, rows in groups:
        before = {p: len(parts) for p, parts in kept.items()}
        tr, out = run(torch.stack([batch.sequence(r) for r in rows]), rows)
        traces.append(tr)
        kept_logits = kept_logits and out is not None
        if out is not None:
            for k, row in enumerate(rows):
                logits[row] = out[k]
        for p, parts in kept.items():  # [b, ...] tensors, or (under grad=True) tuples of b rows in the graph
            joined = [one for part in parts[before[p] :] for one in part]
            for k, row in enumerate(rows):
                cached[p][row] = joined[k]
    forwards = [-(-len(rows) // batch_size) for _, rows in groups]
    merged = merge_traces(traces, [rows for _, rows in groups], forwards)
    stats = [getattr(t, "grad_stats", None) for t in traces]
    if all(isinstance(s, dict) for s in stats):  # issue 40 item 3's differentiable statistics, [n, ...] per group
        names: dict = stats[0]  # type: ignore[assignment]
        rows_of = {name: _in_order([s[name] for s in stats], groups) for name in names}  # type: ignore[index]
        merged.grad_stats = {name: join_rows(rows) for name, rows in rows_of.items()}  # type: ignore[attr-defined]
    # rows in autograd's graph stay a list (stacked, they would be a copy no gradient reaches)
    cache = {p: v if any(r.requires_grad for r in v) else join_rows(v) for p, v in cached.items() if kept[p]}
    return merged, padded_logits(batch, logits) if kept_logits else None, cache


def _in_order(parts: list[torch.Tensor], groups: list[tuple[int, list[int]]]) -> list[torch.Tensor]:
    """Each sequence's row of the groups' [n_g, ...] tensors, in input order."""
    rows: dict[int, torch.Tensor] = {}
    for part, (_, members) in zip(parts, groups):
        rows.update({row: part[k] for k, row in enumerate(members)})
    return [rows[r] for r in sorted(rows)]


def join_rows(rows: list[torch.Tensor]) -> Any:
    """Per-sequence tensors [...] as one [N, ...] tensor when their shapes agree, else the list itself (sequences
    of different lengths: one tensor each, the batch axis dropped)."""
    if len({tuple(r.shape) for r in rows}) == 1:
        return torch.stack(rows)
    return rows


def padded_logits(batch: Batch, logits: list[torch.Tensor]) -> torch.Tensor:
    """[N, P, V] in the layout of `batch.ids`: each row's logits [T_row, V] at its real positions, NaN at its pads
    (on the logits' device and dtype, so a graph they carry is kept)."""
    first = logits[0]
    out = torch.full((*batch.ids.shape, first.shape[-1]), float("nan"), dtype=first.dtype, device=first.device)
    for row, lg in enumerate(logits):
        out[row, batch.starts[row] : batch.starts[row] + batch.lengths[row]] = lg
    return out


def _per_position(parts: list[np.ndarray], counts: list[int]) -> np.ndarray:
    """[..., P_max] at t: the mean over sequences with a position t of their value, from per-group means [..., T_g]
    over n_g sequences each."""
    P = max(a.shape[-1] for a in parts)
    total = np.zeros((*parts[0].shape[:-1], P))
    n = np.zeros(P)
    for a, c in zip(parts, counts):
        total[..., : a.shape[-1]] += c * a
        n[: a.shape[-1]] += c
    return total / n


def _weighted(parts: list[np.ndarray], weights: list[np.ndarray]) -> np.ndarray:
    """Σ_g w_g x_g / Σ_g w_g, x_g left out where w_g = 0 (its NaN there means "not seen"); NaN where every w_g = 0,
    as `by_token` gives."""
    num = np.sum([np.where(w > 0, w * x, 0.0) for x, w in zip(parts, weights)], axis=0)
    den = np.sum(weights, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _col_mean(parts: list[Trace], counts: list[int]) -> np.ndarray:
    """ᾱ_j over every (sequence, query i ≥ j): group g contributes n_g (T_g − j) queries to key j."""
    P = max(t.seq_len for t in parts)
    total, n = np.zeros((*parts[0].attn_col_mean.shape[:2], P)), np.zeros(P)
    for t, c in zip(parts, counts):
        seen = c * (t.seq_len - np.arange(t.seq_len))
        total[..., : t.seq_len] += t.attn_col_mean * seen
        n[: t.seq_len] += seen
    return total / n


def _row_entropy(parts: list[Trace], counts: list[int]) -> np.ndarray:
    """The mean over every non-empty row i ≥ 1: group g has n_g (T_g − 1) rows per head less its empty ones."""
    rows = [c * (t.seq_len - 1) - t.empty_rows for t, c in zip(parts, counts)]
    total = np.sum([np.where(r > 0, t.row_entropy * r, 0.0) for t, r in zip(parts, rows)], axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / np.sum(rows, axis=0)


def _massive(parts: list[Trace], groups: list[list[int]]) -> list[dict]:
    """Every group's massive entries with `sample` as the input row, the largest MAX_MASSIVE_ENTRIES per stream."""
    by_stream: dict[int, list[dict]] = {}
    for t, rows in zip(parts, groups):
        for r in massive_records(t.massive):  # Trace.massive is a DataFrame; its rows as dicts
            by_stream.setdefault(int(r["layer"]), []).append({**r, "sample": rows[int(r["sample"])]})
    merged = []
    for stream in sorted(by_stream):
        merged += sorted(by_stream[stream], key=lambda r: -abs(r["value"]))[:MAX_MASSIVE_ENTRIES]
    return merged


def _patterns(parts: list[Trace], groups: list[list[int]], N: int) -> dict[str, np.ndarray]:
    """{"l.h": [N, P_max, P_max]} float32, NaN outside each sequence's own block."""
    P = max(t.seq_len for t in parts)
    out: dict[str, np.ndarray] = {}
    for t, rows in zip(parts, groups):
        for key, pat in t.patterns.items():
            full = out.setdefault(key, np.full((N, P, P), np.nan, dtype=np.float32))
            full[rows, : pat.shape[1], : pat.shape[2]] = pat
    return out


def _paths(parts: list[Trace]) -> list[str]:
    """Each layer's kernels over every group, joined by "+" in the order first met."""
    out = []
    for layer in range(len(parts[0].attention_paths)):
        seen: list[str] = []
        for t in parts:
            seen += [p for p in t.attention_paths[layer].split("+") if p and p not in seen]
        out.append("+".join(seen))
    return out


def _per_sample(parts: list[Trace], groups: list[list[int]], name: str, N: int) -> np.ndarray:
    out = np.full((N, *getattr(parts[0], name).shape[1:]), np.nan)
    for t, rows in zip(parts, groups):
        out[rows] = getattr(t, name)
    return out


def _sink_record(parts: list[Trace], groups: list[list[int]]) -> Any:
    """The groups' secondary-sink records joined, `sample` renumbered to the input row (None if any has none)."""
    recs: list[Any] = [getattr(t, "sink_record", None) for t in parts]
    if any(r is None for r in recs):
        return None

    def rows(name: str) -> np.ndarray:
        arrays = []
        for rec, g in zip(recs, groups):
            a = np.array(getattr(rec, name), dtype=np.float64, copy=True)
            if name in ("hits", "tokens") and len(a):
                a[:, 0] = np.asarray(g)[a[:, 0].astype(int)]
            arrays.append(a)
        return np.concatenate(arrays)

    hits, tokens = rows("hits"), rows("tokens")
    order, tok_order = np.argsort(hits[:, 0], kind="stable"), np.argsort(tokens[:, 0], kind="stable")
    checked = np.logical_and.reduce([np.asarray(r.checked) for r in recs])
    return replace(recs[0], hits=hits[order], tokens=tokens[tok_order], mlp_norm=rows("mlp_norm")[tok_order],
                   mlp_cos=rows("mlp_cos")[tok_order], checked=checked)  # fmt: skip


def _max_entry(parts: list[Trace]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The largest |x| of each stream over the groups and where it lies (the first group's on a tie)."""
    best = np.argmax(np.stack([t.max_abs for t in parts]), axis=0)  # [R] the first group holding the maximum
    pick = [np.choose(best, [getattr(t, name) for t in parts]) for name in ("max_abs", "max_pos", "max_dim")]
    return pick[0], pick[1], pick[2]


def merge_traces(parts: list[Trace], groups: list[list[int]], forwards: list[int]) -> Trace:
    """One `Trace` of N = Σ |groups| sequences from one trace per real length (the module docstring's rules);
    `groups[g]` are the input rows of `parts[g]`'s samples, `forwards[g]` the forwards it ran."""
    if len(parts) == 1 and groups[0] == list(range(len(groups[0]))):
        return parts[0]
    N, counts = sum(len(g) for g in groups), [len(g) for g in groups]
    fields: dict[str, Any] = {name: _per_position([getattr(t, name) for t in parts], counts) for name in PER_POSITION}
    tok = [t.token_count for t in parts]
    dl = [t.dlogit_count for t in parts]
    max_abs, max_pos, max_dim = _max_entry(parts)
    lsink = [t.learned_sink_by_query for t in parts]
    trace = replace(
        parts[0],  # fields this module does not know (a later addition to Trace) keep the first group's values
        **fields,
        attn_col_mean=_col_mean(parts, counts),
        attn_key0_by_token=_weighted([t.attn_key0_by_token for t in parts], [c[None, None] for c in tok]),
        token_count=np.sum(tok, axis=0),
        dlogit_by_token=_weighted([t.dlogit_by_token for t in parts], [c[None, None] for c in dl]),
        dlogit_count=np.sum(dl, axis=0),
        row_entropy=_row_entropy(parts, counts),
        empty_rows=np.sum([t.empty_rows for t in parts], axis=0),
        max_abs=max_abs,
        max_pos=max_pos,
        max_dim=max_dim,
        median_abs=np.sum([t.median_abs * f for t, f in zip(parts, forwards)], axis=0) / sum(forwards),
        sink_score_per_sample=_per_sample(parts, groups, "sink_score_per_sample", N),
        key0_col_mean_per_sample=_per_sample(parts, groups, "key0_col_mean_per_sample", N),
        massive=_massive(parts, groups),
        patterns=_patterns(parts, groups, N),
        learned_sink_by_query=None if any(x is None for x in lsink) else _per_position(lsink, counts),  # type: ignore[arg-type]
        attention_paths=_paths(parts),
        logits=None,
    )
    if getattr(trace, "sink_record", None) is not None:
        setattr(trace, "sink_record", _sink_record(parts, groups))  # noqa: B010 (a field added by issue 41)
    return trace


def by_length(run: Callable, batch: Batch, kept: dict[str, list], ivs: list, batch_size: int) -> Callable:
    """`run` (`_run_hf`/`_run_toy`'s signature) for a padded batch: pads stripped, one run per real length, merged
    in input order (`run_groups`: exact, each sequence as if traced alone; docs/api.md, "Padded
    batches"). Its logits come in the layout of the given ids, NaN at the pads; each cached point's list ends up
    holding one item: the [N, ...] tensor, or where the lengths differ the list of one tensor per sequence. A
    `MoveToSink` query mask, given in the ids' layout, is checked at once (before any forward) and cut like them."""
    _check_row_masks(ivs, batch)

    def padded(model: Any, ids: torch.Tensor, group_ivs: list, *rest: Any) -> tuple[Trace, torch.Tensor | None]:
        def one(x: torch.Tensor, rows: list[int]) -> tuple[Trace, torch.Tensor | None]:
            return run(model, x, _rows_of_masks(group_ivs, batch, rows), *rest)

        tr, out, cached = run_groups(one, batch, batch_size, kept)
        for point, joined in cached.items():
            kept[point][:] = [joined]
        return tr, out

    return padded


def _check_row_masks(ivs: list, batch: Batch) -> None:
    """One line for a `MoveToSink` query mask that is not [batch, pos] like the padded ids."""
    from attnlab.tracing.interventions import MoveToSink

    for iv in ivs:
        if isinstance(iv, MoveToSink) and iv.queries is not None:
            shape = tuple(torch.as_tensor(iv.queries).shape)  # a tensor, an array or nested lists
            if shape != tuple(batch.ids.shape):
                raise InputError(f"MoveToSink queries has shape {shape}; with padded ids it is [batch, pos] like "
                                 f"them, {tuple(batch.ids.shape)}")  # fmt: skip


def _rows_of_masks(ivs: list, batch: Batch, rows: list[int]) -> list:
    """`ivs` with each `MoveToSink` query mask [N, P] cut to `rows`' real positions: [len(rows), T]."""
    from attnlab.tracing.interventions import MoveToSink

    def cut(queries: Any) -> torch.Tensor:
        q = torch.as_tensor(queries)
        return torch.stack([q[r, batch.starts[r] : batch.starts[r] + batch.lengths[r]] for r in rows])

    masked = [isinstance(iv, MoveToSink) and iv.queries is not None for iv in ivs]
    return [replace(iv, queries=cut(iv.queries)) if m else iv for iv, m in zip(ivs, masked)]
