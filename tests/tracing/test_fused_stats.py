"""The per-layer reductions of the fused trace path against float64 recomputations (issue 23): value norms from
the per-session triangular factors of W_O^h (rank-deficient heads included), the logit statistics on grouped KV
heads, the key columns."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.tracing import cpu_kernels
from attnlab.tracing.adapters.hf_attention import _logit_stats, _triangular_factors, _value_norms, value_factor
from attnlab.tracing.adapters.hf_fused import fused_kernel, key_columns


def _grouped(B: int, H: int, Hkv: int, T: int, D: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B,H,T,D] and k [B,H_kv,T,D] in transformers' layout (a transposed [B,T,heads,D] tensor)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, D, generator=g).transpose(1, 2)
    k = (torch.randn(B, T, Hkv, D, generator=g) + 2.0).transpose(1, 2)
    return q, k


@pytest.mark.parametrize("d", [20, 5])  # 5 < d_h: the triangular factor is zero-padded to [d_h, d_h]
@pytest.mark.parametrize("T", [11, 1100])  # 1100: three blocks of STAT_ROWS tokens
def test_value_norms_equal_the_direct_norms_with_a_zero_and_a_rank_deficient_head(T, d):
    g = torch.Generator().manual_seed(0)
    H, Hkv, D = 6, 2, 8
    w = torch.randn(H, d, D, generator=g)
    w[1] = 0.0  # a zeroed head: its factor is 0
    w[4, :, :3] = w[4, :, 3:6]  # repeated columns: a rank-deficient W_O^h
    w[2, :, 0] *= 1e-6  # an ill-conditioned head (κ ~ 1e6): the QR factor, not the Gram matrix's Cholesky factor
    r = _triangular_factors(w.double())
    assert bool((r.tril(-1) == 0).all())
    torch.testing.assert_close(r.transpose(1, 2) @ r, w.double().transpose(1, 2) @ w.double(), rtol=0, atol=1e-12)
    v = torch.randn(2, Hkv, T, D, generator=g)
    got = _value_norms(v, value_factor(w, Hkv))  # [B,T,H]
    vq = v.double().repeat_interleave(H // Hkv, dim=1)  # query head h reads KV head h ÷ (H/H_kv)
    direct = torch.linalg.vector_norm(torch.einsum("bhtd,hed->bhte", vq, w.double()), dim=-1).transpose(1, 2)
    assert got.shape == (2, T, H)
    torch.testing.assert_close(got.double(), direct, rtol=1e-5, atol=1e-5)
    assert bool((got[..., 1] == 0).all())


@pytest.mark.parametrize("layout", ["projection", "contiguous"])  # q [B,T,H,D] transposed, or [B,H,T,D] itself
@pytest.mark.parametrize("T", [1, 2, 3, 130, 600])  # 600: two blocks of LOGIT_ROWS, sums carried across
def test_logit_statistics_on_grouped_heads_equal_the_score_matrix(T, layout):
    q, k = _grouped(2, 6, 2, T, 16, seed=T)
    if layout == "contiguous":
        q, k = q.contiguous(), k.contiguous()
    s0, rest = _logit_stats(q, k, 0.25)
    s = q.double() @ k.double().repeat_interleave(3, dim=1).transpose(-1, -2) * 0.25  # [B,H,T,T]
    torch.testing.assert_close(s0.double(), s[..., 0], rtol=1e-5, atol=1e-5)
    for i in range(2, T):
        torch.testing.assert_close(rest[..., i].double(), s[..., i, 1:i].mean(-1), rtol=1e-5, atol=1e-5)
    assert bool((rest[..., : min(T, 2)] == 0).all())


def test_key_columns_on_grouped_heads_equal_the_softmax():
    T = 40
    q, k = _grouped(1, 6, 3, T, 16, seed=9)
    v = torch.randn(1, 3, T, 16)
    _, lse = fused_kernel(q, k, v, None, 0.25)
    keys = torch.tensor([0, 5, 39])
    got = key_columns(q, k, lse, keys, None, 0.25)  # [B,H,T,J]
    s = q.double() @ k.double().repeat_interleave(2, dim=1).transpose(-1, -2) * 0.25
    A = torch.softmax(s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")), dim=-1)
    torch.testing.assert_close(got.double(), A[..., keys], rtol=1e-5, atol=1e-6)


def _softmax_reference(q, k, mask, scale, sink=None):
    """(Σ_i A_ij [B,H,T], Σ_{i≥1} H_i / log(i+1) [B,H]) in float64 from the full score matrix (mask [T,T] bool,
    True = visible; sink [H] logits: A takes its share, H_i is the entropy of the keys' renormalised weights)."""
    s = q.double() @ k.double().repeat_interleave(q.shape[1] // k.shape[1], dim=1).transpose(-1, -2) * scale
    s = s.masked_fill(~mask, float("-inf"))
    P = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)
    ent = -torch.special.xlogy(P, P).sum(-1)[..., 1:] / torch.log(torch.arange(2, q.shape[2] + 1).double())
    if sink is not None:
        s = torch.cat([s, sink.double().view(1, -1, 1, 1).expand(*s.shape[:-1], 1)], dim=-1)
    A = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)[..., : q.shape[2]]
    return A.sum(2), ent.sum(-1)


@pytest.mark.parametrize("masked", [False, True])
def test_the_swapped_call_gives_the_softmax_columns_and_row_entropies(masked):
    """`swapped_statistics` (queries and keys swapped, one fused call) against float64 column sums and normalised
    row entropies, on grouped heads, with a boolean mask that hides a whole query row and a whole key column, and
    with a learned sink."""
    from attnlab.tracing.adapters.hf_fused import swapped_statistics

    T, scale = 37, 0.3
    q, k = _grouped(2, 6, 2, T, 16, seed=4)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    if masked:
        mask &= torch.ones(T, T, dtype=torch.bool).triu(-9)  # a sliding window of 10
        mask[5, :] = False  # a query that sees nothing
        mask[:, 11] = False  # a key nobody sees
    bool_mask = mask.view(1, 1, T, T) if masked else None
    add = None if bool_mask is None else torch.zeros(1, 1, T, T).masked_fill(~bool_mask, float("-inf"))
    _, lse = fused_kernel(q, k, k, add, scale)
    cols, ent = swapped_statistics(q, k, (lse, lse), bool_mask, scale)
    want_cols, want_ent = _softmax_reference(q, k, mask, scale)
    torch.testing.assert_close(cols.double(), want_cols, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ent, want_ent, rtol=1e-5, atol=1e-5)
    sink = torch.linspace(-1.0, 3.0, 6)
    lse_sink = torch.logaddexp(lse, sink.view(1, 6, 1))
    cols, ent = swapped_statistics(q, k, (lse_sink, lse), bool_mask, scale)
    want_cols, want_ent = _softmax_reference(q, k, mask, scale, sink)
    torch.testing.assert_close(cols.double(), want_cols, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ent, want_ent, rtol=1e-5, atol=1e-5)


def test_the_cuda_kernels_bias_is_padded_to_16_and_keeps_its_values():
    """The memory-efficient CUDA kernel wants the additive mask's rows 16-element aligned (checked here on the cpu:
    the layout and the values; the kernel itself runs in tests/gpu)."""
    from attnlab.tracing.adapters.hf_fused import _aligned_bias

    mask = torch.zeros(1, 1, 5, 37).masked_fill_(torch.ones(5, 37, dtype=torch.bool).triu(1), float("-inf"))
    got = _aligned_bias(mask.expand(2, 3, -1, -1))
    assert got.shape == (2, 3, 5, 37) and got.stride(-1) == 1 and got.stride(-2) % 16 == 0
    assert torch.equal(got, mask.expand(2, 3, -1, -1))


@pytest.mark.skipif(not cpu_kernels.AVAILABLE, reason="numba is not installed")
@pytest.mark.parametrize("T", [1, 2, 37, 300])  # 300: three blocks of 128 query rows
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_full_rows_attention_equals_the_float64_softmax(T, dtype):
    """`full_rows_attention` (stats="full" in the forward's own attention, cpu) against float64 recomputations on
    grouped heads: the output against the softmax times the values, the log-sum-exp, every column sum and the
    normalised row entropies (rows with scores ~100 apart included: weights far below float32's range). The bound:
    a float32 score s carries an absolute rounding of |s|·2⁻²⁴, which exp turns into that relative error, so the
    tolerance is 8·2⁻²⁴·max|s| (~1e-4 here; 1e-5 at least; 7e-6 reached on the AVX-512 VM of 2026-12-04)."""
    from attnlab.tracing.adapters.hf_fused import full_rows_attention

    q, k = _grouped(2, 6, 2, T, 16, seed=T)
    q[:, :, T // 2] *= 40.0  # a row whose scores span ~100: exp underflows in float32
    v = torch.randn(2, T, 2, 16, generator=torch.Generator().manual_seed(1)).transpose(1, 2)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    scale = 0.3
    out, lse, cols, ent = full_rows_attention(q, k, v, scale)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    want_cols, want_ent = _softmax_reference(q, k, mask, scale)
    s = q.double() @ k.double().repeat_interleave(3, dim=1).transpose(-1, -2) * scale
    s = s.masked_fill(~mask, float("-inf"))
    want_out = torch.softmax(s, -1) @ v.double().repeat_interleave(3, dim=1)  # [B,H,T,d_v]
    assert out.dtype == dtype and out.shape == (2, T, 6, 16)
    tol = max(1e-5, 8 * 2**-24 * float(s[torch.isfinite(s)].abs().max()))
    out_tol = tol if dtype == torch.float32 else 8e-3  # bfloat16: the output's own rounding
    torch.testing.assert_close(out.double(), want_out.transpose(1, 2), rtol=out_tol, atol=out_tol)
    torch.testing.assert_close(lse.double(), torch.logsumexp(s, -1), rtol=tol, atol=tol)
    torch.testing.assert_close(cols, want_cols, rtol=tol, atol=tol)
    torch.testing.assert_close(ent, want_ent, rtol=tol, atol=tol)


@pytest.mark.skipif(not cpu_kernels.AVAILABLE, reason="numba is not installed")
def test_exp_of_the_softmax_rows_is_within_three_ulp():
    """The vectorised exponential of `cpu_kernels.softmax_rows` against float64 exp over [−87, 0] (within 3 ulp: the
    polynomial's remainder is < 0.2 ulp, the rest is the rounding of its eight steps), and its floor."""
    x = np.linspace(-87.0, 0.0, 200_001).astype(np.float32)
    row = np.concatenate([x, np.zeros(1, np.float32)])[None]  # one row whose maximum is 0: it becomes exp(x_j)
    T = row.shape[1]
    stats = (np.zeros((1, T)), np.zeros(1), np.zeros((1, T), np.float32))
    inv_z, part = np.zeros(1, np.float32), np.zeros((1, T), np.float32)
    got = row.copy()
    cpu_kernels.softmax_rows(got, T - 1, 1, 0, stats, inv_z, part)
    want = np.exp(x.astype(np.float64))
    ulp = np.spacing(want.astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got[0, :-1] - want) / ulp) <= 3.0  # 0.93 ulp on the AVX-512 VM of 2026-12-04
    assert abs(inv_z[0] * (want.sum() + 1.0) - 1.0) < 1e-6
    below = np.array([[-500.0, 0.0]], dtype=np.float32)  # exp(−500) is taken as exp(−87): ≤ 1.6e-38
    stats = (np.zeros((1, 2)), np.zeros(1), np.zeros((1, 2), np.float32))
    cpu_kernels.softmax_rows(below, 1, 1, 0, stats, inv_z, np.zeros((1, 2), np.float32))
    assert 0.0 < below[0, 0] <= 1.7e-38 and below[0, 1] == 1.0


@pytest.mark.parametrize("n", [1, 512, 513, 1536, 1700])
def test_running_sum_in_chunks_equals_cumsum(n):
    """`_running_sum` (chunks of 512 rows, their totals carried: the accelerator's blocks of the logit statistics)
    against torch.cumsum in float64, the chunk boundaries and a partial last chunk included."""
    from attnlab.tracing.adapters.hf_attention import _running_sum

    x = torch.randn(2, n, 3, 4, generator=torch.Generator().manual_seed(n))
    got = _running_sum(x)
    assert got.shape == x.shape
    torch.testing.assert_close(got.double(), torch.cumsum(x.double(), dim=1), rtol=1e-5, atol=1e-4)


def test_logit_statistics_in_one_accelerator_sized_block_equal_the_cpu_blocks(monkeypatch):
    """`_logit_stats_blocked` with one block of every row (an accelerator's `rows_per_block`: the running key sums by
    `_running_sum`'s chunks) against its cpu blocks of LOGIT_ROWS rows."""
    from attnlab.tracing.adapters import hf_attention

    q, k = _grouped(1, 6, 2, 1300, 16, seed=3)
    want = hf_attention._logit_stats_blocked(q, k, 0.25)
    monkeypatch.setattr(hf_attention, "rows_per_block", lambda rows, device, width: 1 << 20)
    got = hf_attention._logit_stats_blocked(q, k, 0.25)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
