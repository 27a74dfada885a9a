"""BatchStage and the recorder's end-of-batch reduction (issue 23): the same sums as a direct float64 computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.errors import AttnlabError
from attnlab.tracing.fast.staging import BatchStage
from attnlab.tracing.recorder import TraceRecorder
from tests.numerics import assert_close
from tests.real.rounding import U64


def test_stage_takes_layers_in_order_as_float64() -> None:
    st = BatchStage(4)
    st.reset()
    a, b = torch.randn(2, 3, 5), torch.randn(2, 3, 5)
    st.put("x", 3, a)
    st.put("x", 1, b)
    layers, rows = st.take("x")
    assert layers.tolist() == [3, 1] and rows.dtype == torch.float64
    assert torch.equal(rows[0], a.double()) and torch.equal(rows[1], b.double())
    assert st.take("x") is None  # taken: empty until the next put


def test_stage_refuses_a_layer_twice() -> None:
    st = BatchStage(2)
    st.reset()
    st.put("x", 0, torch.zeros(3))
    with pytest.raises(AttnlabError, match="twice"):
        st.put("x", 0, torch.zeros(3))


@pytest.mark.numerics
def test_reduction_of_a_subset_of_layers_matches_direct_sums() -> None:
    """Layers recorded out of order and not all of them, over two batches: the key-0 sums, the per-sequence sink
    score, the grouping by token and the value norms equal a float64 computation written out directly."""
    L, H, T, V = 3, 2, 6, 5
    g = torch.Generator().manual_seed(0)
    rec = TraceRecorder(L, H, T, vocab_size=V)
    want_tok = torch.zeros(L, H, V, dtype=torch.float64)
    want_key0 = torch.zeros(L, H, T, dtype=torch.float64)
    want_vn = torch.zeros(L, H, T, dtype=torch.float64)
    for _ in range(2):
        tok = torch.randint(0, V, (2, T), generator=g)
        rec.begin_batch(tok)
        for layer in (2, 0):
            k0 = torch.rand(2, H, T, generator=g)
            vn = torch.rand(2, T, H, generator=g)
            rec.fused_rows(layer, k0)
            rec.value_norms(layer, vn)
            want_key0[layer] += k0.double().sum(0)
            want_vn[layer] += vn.double().sum(0).T
            for b in range(2):
                for i in range(T):
                    want_tok[layer, :, tok[b, i]] += k0[b, :, i].double()
    tr = rec.result()
    # Float64 sums of nonnegative float32 values in two orders, at most n = 4·T = 24 terms, and a division: within
    # 2·(n + 1)·2^-53 relative (was 1e-12).
    rtol = 2 * (4 * T + 1) * U64
    assert_close(tr.attn_key0_by_query[[0, 2]], (want_key0 / 4)[[0, 2]], rtol=rtol, label="key0 by query", kind="bound")
    assert np.isnan(tr.sink_score_per_sample[:, 1]).all() and np.isfinite(tr.sink_score_per_sample[:, [0, 2]]).all()
    counts = tr.token_count
    seen = counts > 0
    assert_close(tr.attn_key0_by_token[[0, 2]][..., seen], (want_tok[[0, 2]].numpy() / counts)[..., seen], rtol=rtol,
                 label="key0 by token", kind="bound")  # fmt: skip
    assert_close(tr.value_norm[[0, 2]], (want_vn / 4)[[0, 2]], rtol=rtol, label="value norms", kind="bound")
    assert counts.sum() == 4 * T
