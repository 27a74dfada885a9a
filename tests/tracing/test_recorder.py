"""The streaming reducers equal the statistics computed from full patterns."""

import numpy as np
import pandas as pd
import pytest
import torch

from attnlab.tracing import Trace, TraceRecorder
from tests.numerics import assert_close
from tests.real.rounding import U32, U64


def _causal_softmax(scores):
    T = scores.shape[-1]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    return scores.masked_fill(~mask, float("-inf")).softmax(-1)


def _record(batches, L, H, T, V, **kw):
    rec = TraceRecorder(L, H, T, vocab_size=V, **kw)
    for tok, per_layer in batches:
        rec.begin_batch(tok, batch_size=per_layer[0][0].shape[0])
        for layer, (A, S) in enumerate(per_layer):
            rec.attention(layer, A, S)
    return rec.result()


@pytest.mark.numerics
def test_reducers_match_full_pattern_statistics():
    torch.manual_seed(0)
    L, H, T, V, B = 2, 3, 7, 5, 4
    batches, allA, allS, allTok = [], [], [], []
    for _ in range(3):
        tok = torch.randint(0, V, (B, T))
        per_layer = []
        for _ in range(L):
            S = torch.randn(B, H, T, T, dtype=torch.float64) * 2
            per_layer.append((_causal_softmax(S), S))
        batches.append((tok, per_layer))
        allTok.append(tok)
        allA.append(torch.stack([a for a, _ in per_layer], 1))
        allS.append(torch.stack([s for _, s in per_layer], 1))
    tr = _record(batches, L, H, T, V, keep_patterns=[(1, 2)])
    A = torch.cat(allA).numpy()  # [N,L,H,T,T]
    S = torch.cat(allS).numpy()
    tok = torch.cat(allTok).numpy()  # [N,T]
    N = A.shape[0]
    # Float64 on both sides, means of at most n = N·T = 84 terms in two orders (the recorder's batched sums, numpy's
    # pairwise ones): within 2·(n + 2)·2^-53·max|term| of each other (was 1e-12). Weights are at most 1, the logit
    # differences at most 2·max|S| and the normalised entropy terms at most 1 (plus 4 roundings of log and /).
    n = N * T
    bound = 2 * (n + 2) * U64
    # column mean over the queries that see each key
    col = np.stack([A[..., j:, j].mean(-1) for j in range(T)], -1).mean(0)
    assert_close(tr.attn_col_mean, col, atol=bound, label="col mean", kind="bound")
    assert_close(tr.sink_score(), A[..., 1:, 0].mean(-1).mean(0), atol=bound, label="sink score", kind="bound")
    assert_close(tr.sink_score_per_sample, A[..., 1:, 0].mean(-1), atol=bound, label="sink per sample", kind="bound")
    # key-0 attention grouped by query token
    for v in range(V):
        sel = tok == v  # [N,T]
        expect = np.stack([[A[:, l, h, :, 0][sel].mean() for h in range(H)] for l in range(L)])
        assert_close(tr.attn_key0_by_token[..., v], expect, atol=bound, label="key0 by token", kind="bound")
    # Δlogit: s_i0 − mean_{1≤j≤i−1} s_ij for i ≥ 2
    d = np.full((N, L, H, T), np.nan)
    for i in range(2, T):
        d[..., i] = S[..., i, 0] - S[..., i, 1:i].mean(-1)
    assert_close(tr.dlogit_by_query[..., 2:], d[..., 2:].mean(0), atol=bound * 2 * np.abs(S).max(), label="dlogit",
                 kind="bound")  # fmt: skip
    # normalised row entropy
    ent = np.zeros((N, L, H, T - 1))
    for i in range(1, T):
        p = A[..., i, : i + 1]
        ent[..., i - 1] = -(p * np.log(p)).sum(-1) / np.log(i + 1)
    assert_close(tr.row_entropy, ent.mean(axis=(0, 3)), atol=2 * (n + 2 + 4) * U64, label="entropy", kind="bound")
    assert tr.patterns["1.2"].shape == (N, T, T)
    # Kept patterns are stored in float32: one rounding, 2^-24 relative (was atol 1e-6).
    assert_close(tr.patterns["1.2"], A[:, 1, 2], rtol=U32, label="kept pattern", kind="bound")
    assert np.all((tr.attn_col_mean >= 0) & (tr.attn_col_mean <= 1))


def test_relu_rows_renormalised_and_empty_rows_counted():
    T = 4
    A = torch.zeros(1, 1, T, T, dtype=torch.float64)
    A[0, 0, 0, 0] = 1.0
    A[0, 0, 2, :2] = torch.tensor([0.1, 0.1])  # renormalises to uniform over 2 of 3 keys
    tr = _record([(None, [(A, None)])], 1, 1, T, 0)
    assert tr.empty_rows[0, 0] == 2  # rows 1 and 3 are all zero
    # Two logs, a product, a sum and a division in float64: 8·2^-53 relative (numpy's default 1e-7 before).
    assert_close(tr.row_entropy[0, 0], np.log(2) / np.log(3), rtol=8 * U64, label="relu entropy", kind="bound")


def test_residual_and_value_norms_and_save_roundtrip(tmp_path):
    rec = TraceRecorder(1, 2, 3, vocab_size=0)
    rec.begin_batch(None, batch_size=2)
    A = _causal_softmax(torch.zeros(2, 2, 3, 3))
    rec.attention(0, A)
    rec.value_norms(0, torch.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]] * 2))
    h = torch.ones(2, 3, 4)
    h[1, 0, 2] = 5000.0
    rec.residual(0, h)
    rec.residual(1, h * 2)
    tr = rec.result()
    # Means of two equal small integers and one division: 4·2^-53 relative (numpy's default 1e-7 before).
    assert_close(tr.value_norm[0, :, 0], [1.0, 2.0], rtol=4 * U64, label="value norm", kind="bound")
    assert_close(tr.value_norm_ratio()[0], [1 / 4, 2 / 5], rtol=4 * U64, label="value norm ratio", kind="bound")
    assert tr.max_abs[0] == 5000.0 and tr.max_pos[0] == 0 and tr.max_dim[0] == 2
    m = tr.massive
    assert ((m["dim"] == 2) & (m["pos"] == 0) & (m["sample"] == 1)).any()
    tr.save(tmp_path / "trace")
    back = Trace.load(tmp_path / "trace")
    np.testing.assert_array_equal(back.resid_norm, tr.resid_norm)
    pd.testing.assert_frame_equal(back.massive, tr.massive)


@pytest.mark.numerics
def test_chunked_rows_equal_whole_patterns_in_one_recorder():
    """`attention_rows` (query chunks, fp32) + `logits` fill the same sums as `attention` (whole pattern)."""
    g = torch.Generator().manual_seed(3)
    L, H, T, V, B = 2, 3, 9, 6, 2
    tok = torch.randint(0, V, (B, T), generator=g)
    S = torch.randn(L, B, H, T, T, generator=g, dtype=torch.float64)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    A = S.masked_fill(~causal, float("-inf")).softmax(-1)
    whole, rows = (
        TraceRecorder(L, H, T, vocab_size=V, keep_patterns=[(1, 0)]),
        TraceRecorder(L, H, T, vocab_size=V, keep_patterns=[(1, 0)]),
    )
    whole.begin_batch(tok)
    rows.begin_batch(tok)
    lower = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1)
    lower[:, 0] = False
    for layer in range(L):
        whole.attention(layer, A[layer], S[layer])
        masked = S[layer].masked_fill(~causal, -1e30)
        for q0 in range(0, T, 4):
            rows.attention_rows(layer, q0, A[layer, :, :, q0 : q0 + 4].float(), masked[:, :, q0 : q0 + 4].float())
        rest = torch.where(lower, S[layer], 0.0).sum(-1) / (torch.arange(T) - 1).clamp_min(1)
        rows.logits(layer, S[layer][..., 0], rest)
    a, b = whole.result(), rows.result()
    for name in (
        "attn_col_mean",
        "attn_key0_by_query",
        "attn_key0_by_token",
        "row_entropy",
        "dlogit_by_query",
        "dlogit_by_token",
        "sink_score_per_sample",
        "key0_col_mean_per_sample",
    ):
        # float32 rows (and the row entropy's float32 arithmetic) against float64 whole patterns: observed 4.3e-8 at
        # most over the numerics matrix, against 1e-5 (kept).
        assert_close(getattr(b, name), getattr(a, name), atol=1e-5, label=f"chunked {name}", kind="observed")
    # Kept patterns are the float32 rows: one rounding, 2^-24 relative (was atol 1e-6).
    assert_close(b.patterns["1.0"], a.patterns["1.0"], rtol=U32, label="chunked pattern", kind="bound")


def test_rows_outside_the_trace_are_refused():
    import pytest

    from attnlab.errors import AttnlabError

    rec = TraceRecorder(1, 2, 4)
    with pytest.raises(AttnlabError, match="call begin_batch"):
        rec.attention_rows(0, 0, torch.zeros(1, 2, 4, 4))
    rec.begin_batch(None, batch_size=1)
    with pytest.raises(AttnlabError, match="do not fit the trace"):
        rec.attention_rows(0, 2, torch.zeros(1, 2, 3, 4))
    with pytest.raises(AttnlabError, match="do not fit the trace"):
        rec.attention(1, torch.zeros(1, 2, 4, 4))


def test_massive_entries_are_the_largest_over_the_threshold_across_batches():
    from attnlab.tracing.recorder import MASSIVE_ABS, MAX_MASSIVE_ENTRIES

    g = torch.Generator().manual_seed(4)
    rec = TraceRecorder(1, 1, 6)
    batches = [torch.randn(2, 6, 50, generator=g) for _ in range(2)]
    batches[0][0, 0, 3], batches[0][1, 2, 7] = 900.0, -5000.0  # over 100 and over 1000 × the median |h| (≈ 0.67)
    batches[0][0, 3, 3] = 300.0  # over 100 but under 1000 × the median: not massive
    batches[1][1, 5, 49] = 1e4
    batches[1][0, 1:, 9] = torch.linspace(2000, 3000, 5)
    expected = []
    for k, x in enumerate(batches):
        rec.begin_batch(None, batch_size=2)
        rec.residual(0, x)
        med = float(x.abs().reshape(-1).sort().values[(x.numel() - 1) // 2])
        for b, t, dim in (x.abs() > max(MASSIVE_ABS, 1000 * med)).nonzero().tolist():
            expected.append((2 * k + b, t, dim, float(x[b, t, dim])))
    expected.sort(key=lambda e: -abs(e[3]))
    got = [(m["sample"], m["pos"], m["dim"], m["value"]) for m in rec.massive[0]]
    assert got == expected[:MAX_MASSIVE_ENTRIES] and len(got) == 8 and all(abs(e[3]) != 300.0 for e in got)


def test_massive_entries_are_capped_at_the_largest_and_the_maximum_is_the_first():
    """More entries over the threshold than the cap: the largest `MAX_MASSIVE_ENTRIES` by magnitude, largest first;
    the stream's maximum |x| is its first occurrence in (sample, pos, dim) order, as torch.argmax gives it."""
    from attnlab.tracing.recorder import MAX_MASSIVE_ENTRIES

    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 40, 30, generator=g)
    big = 1000.0 + torch.randperm(100, generator=g).double() * 10.0  # 100 distinct values over the threshold
    flat = x.view(-1)
    where = torch.randperm(x.numel(), generator=g)[:100]
    flat[where] = big.float() * torch.where(torch.arange(100) % 2 == 0, 1.0, -1.0)
    flat[where[0]] = flat[where[1]] = 5000.0  # a tie at the maximum
    rec = TraceRecorder(1, 1, 40)
    rec.begin_batch(None, batch_size=2)
    rec.residual(0, x)
    got = [m["value"] for m in rec.massive[0]]
    expected = sorted(flat.tolist(), key=lambda v: -abs(v))[:MAX_MASSIVE_ENTRIES]
    assert len(got) == MAX_MASSIVE_ENTRIES and sorted(got) == sorted(expected)
    assert [abs(v) for v in got] == sorted((abs(v) for v in got), reverse=True)
    first = int(x.abs().argmax())
    tr = rec.result()
    assert (tr.max_abs[0], tr.max_pos[0], tr.max_dim[0]) == (5000.0, (first // 30) % 40, first % 30)


def test_massive_frame_has_its_columns_dtypes_and_rows_from_records_or_a_frame():
    """`Trace.massive` built column by column equals pandas' own records path cast to MASSIVE_COLUMNS (the former
    implementation, an independent construction), with extra columns kept after them; a frame round-trips; an empty
    list gives the typed empty frame; a column an older file lacks reads NaN."""
    import pandas as pd

    from attnlab.tracing.format import MASSIVE_COLUMNS, massive_frame

    rows = [{"layer": i % 3, "sample": i // 4, "pos": i, "dim": 7 * i % 5, "value": 100.5 + i, "median_abs": 0.25,
             "token": f"t{i}"} for i in range(9)]  # fmt: skip
    got = massive_frame(rows)
    want = pd.DataFrame(rows).astype(MASSIVE_COLUMNS)
    want = want[[*MASSIVE_COLUMNS, "token"]]
    pd.testing.assert_frame_equal(got, want)
    pd.testing.assert_frame_equal(massive_frame(got.iloc[::2]), want.iloc[::2].reset_index(drop=True))
    empty = massive_frame([])
    assert list(empty.columns) == list(MASSIVE_COLUMNS) and len(empty) == 0
    assert {c: str(t) for c, t in empty.dtypes.items()} == MASSIVE_COLUMNS
    old = massive_frame([{k: v for k, v in rows[0].items() if k != "median_abs"}])
    assert np.isnan(old["median_abs"].iloc[0]) and old["layer"].dtype == np.int64
