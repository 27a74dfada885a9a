"""`stats="full"` through FlexAttention (issue 41 item 1, `attnlab.tracing.fast.flex`), on the cpu: flex runs there
uncompiled (its reference implementation: the scores materialised, the same score_mod and mask_mod), in float64 where
the algorithm's column sums and entropy sums must equal a float64 softmax to float64 roundoff, and in bfloat16 with
the roundings the CUDA kernel makes (probabilities and values in bf16, float32 accumulation) within a derived
bound. In use the path is CUDA-only (`flex_applies`); the GPU session times it (benchmarks/gpu_check.sh)."""

from __future__ import annotations

import warnings

import pytest
import torch

import attnlab
from attnlab.tracing.fast import flex
from attnlab.tracing.fast.flex import FlexCalls, flex_applies, flex_statistics, swapped_call, upper_block_mask
from attnlab.tracing.fast.fused import swapped_statistics
from tests.numerics import assert_close
from tests.real.rounding import U32, U64, UBF16, assert_within
from tests.tracing.test_fused_stats import _grouped, _softmax_reference, _swapped_cols_rtol

pytestmark = [
    pytest.mark.skipif(not flex.available(), reason="torch without FlexAttention's return_aux (< 2.9)"),
    pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile"),
]

T, SCALE = 37, 0.3  # 37: not a multiple of flex's block (128), nor of the 16-token blocks of the block-mask tests
PADS = 5  # the second sequence's left padding: 5 queries that see nothing and 5 keys that nobody sees


def _mask(kind: str, length: int = T) -> torch.Tensor:
    """[B,T,T] bool, True = query i sees key j: causal, or causal with the second sequence left-padded."""
    mask = torch.ones(2, length, length, dtype=torch.bool).tril()
    if kind == "padded":
        mask[1, :PADS, :] = False
        mask[1, :, :PADS] = False
    return mask


def _scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """[B,H,T,T] s_ij = scale·q_i·k_j in float64 (query head h reads KV head h ÷ (H/H_kv))."""
    kr = k.double().repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    return q.double() @ kr.transpose(-1, -2) * SCALE


def _reference(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor, sink: torch.Tensor | None):
    """(lse [B,H,T] with a learned sink's logit in the normaliser, lse_keys [B,H,T], col sums, entropy sums) in
    float64; -inf for a row that sees nothing."""
    s = _scores(q, k).masked_fill(~mask[:, None], float("-inf"))
    lse_keys = torch.logsumexp(s, -1)
    lse = lse_keys if sink is None else torch.logaddexp(lse_keys, sink.double().view(1, -1, 1))
    cols, ent = [], []
    for b in range(q.shape[0]):  # `_softmax_reference` takes one [T,T] mask
        c, e = _softmax_reference(q[b : b + 1], k[b : b + 1], mask[b], SCALE, sink)
        cols.append(c)
        ent.append(e)
    return lse, lse_keys, torch.cat(cols), torch.cat(ent)


def _inputs(kind: str, sink: bool, dtype: torch.dtype):
    """q [2,6,T,16], k [2,2,T,16] (GQA: 3 query heads a KV head) in `dtype`, the mask, the sink logits or None."""
    q, k = _grouped(2, 6, 2, T, 16, seed=4)
    q, k = q.to(dtype), k.to(dtype)
    return q, k, _mask(kind), (torch.linspace(-1.0, 3.0, 6) if sink else None)


def _bool_mask(kind: str, mask: torch.Tensor) -> torch.Tensor | None:
    return None if kind == "causal" else mask[:, None]


@pytest.mark.numerics
@pytest.mark.parametrize("sink", [False, True], ids=["no-sink", "learned-sink"])
@pytest.mark.parametrize("kind", ["causal", "padded"])
def test_flex_statistics_equal_the_float64_softmax(kind: str, sink: bool) -> None:
    """Column sums and normalised entropy sums of the flex call equal those of the float64 softmax, on grouped
    heads, causal (the upper-triangular block mask) or with a left-padded sequence (rows that see nothing, keys
    nobody sees), with and without a learned sink."""
    q, k, mask, sinks = _inputs(kind, sink, torch.float64)
    lse, lse_keys, want_cols, want_ent = _reference(q, k, mask, sinks)
    cols, ent = flex_statistics(q, k, (lse, lse_keys), _bool_mask(kind, mask), SCALE, FlexCalls(swapped_call))
    assert cols.dtype == torch.float64 and ent.dtype == torch.float64
    # Bound (float64, u = 2^-53): each A_ij = exp(s_ij − lse_i) carries the score's dot product over D = 16 terms
    # (18·u·Σ|s·q·k|), the swapped log-sum-exp over T terms and its exponential ((T + 8)·u) and u·|lse|; the entropy
    # sum Σ w_i·lse_keys_i − Σ_j c_j k_j·O′_j cancels terms of size Σ_i w_i (|lse_keys_i| + Σ_j P_ij |s_ij|), each
    # within (T + D + 8)·u of exact: twice that bounds the difference.
    s = _scores(q, k).masked_fill(~mask[:, None], 0.0)
    rtol = 2 * 18 * U64 * float(s.abs().max()) + 2 * (T + 8) * U64 + U64 * float(lse[lse.isfinite()].abs().max())
    assert_close(cols, want_cols, rtol=rtol, atol=0.0, label="flex cols, float64", kind="bound")
    P = torch.softmax(_scores(q, k).masked_fill(~mask[:, None], float("-inf")), -1).nan_to_num(0.0)
    w = 1.0 / torch.log1p(torch.arange(T, dtype=torch.float64).clamp_min(1.0))
    size = (w * (lse_keys.nan_to_num(0.0, neginf=0.0).abs() + (P * s.abs()).sum(-1))).sum(-1)
    assert_within(ent, want_ent, 2 * (T + 16 + 8) * U64 * size, label="flex entropy, float64")


@pytest.mark.numerics
@pytest.mark.parametrize("kind", ["causal", "padded"])
def test_flex_statistics_equal_the_swapped_fused_call(kind: str) -> None:
    """The two second calls of `stats="full"` agree: flex (float64 here) and the swapped fused call of the cpu and
    CUDA fallback (`swapped_statistics`, float32), within the float32 call's bound against the float64 softmax."""
    q, k, mask, _ = _inputs(kind, False, torch.float64)
    lse, _, want_cols, _ = _reference(q, k, mask, None)
    lse32 = lse.float().nan_to_num(0.0, neginf=0.0)  # the cpu kernel's lse is 0 on a row that sees nothing
    bool_mask = _bool_mask(kind, mask)
    cols, ent = flex_statistics(q, k, (lse, lse), bool_mask, SCALE, FlexCalls(swapped_call))
    old_cols, old_ent = swapped_statistics(q.float(), k.float(), (lse32, lse32), bool_mask, SCALE)
    rtol = _swapped_cols_rtol(q.float(), k.float(), lse32, old_cols, SCALE, T)
    assert_close(cols, old_cols, rtol=rtol, atol=0.0, label="flex vs swapped cols", kind="bound")
    # The float32 entropy sums: within 1e-5 + 1e-5·|ent| of float64 (`test_the_swapped_call_gives_...`, observed).
    assert_close(ent, old_ent, rtol=1e-5, atol=1e-5, label="flex vs swapped entropy", kind="observed")


def check_bf16(kind: str, calls: FlexCalls, device: torch.device, length: int = T, dim: int = 16) -> None:
    """Flex's statistics on `device` of bf16 q [2,6,length,dim], k [2,2,length,dim] (causal or left-padded), with
    the float32 lse the forward kernels give, against float64 on the cpu: the column sums within the float32 bound
    of the swapped call (the scores are exact products of bf16 numbers summed in float32), the entropy sums within
    the bf16 roundings of the probabilities, the values u_i and the output O′ (u = 2^-8 each). Also run on CUDA,
    compiled (tests/gpu)."""
    q, k = (x.to(torch.bfloat16) for x in _grouped(2, 6, 2, length, dim, seed=4))
    mask = _mask(kind, length)
    lse, _, want_cols, want_ent = _reference(q, k, mask, None)
    lse32 = lse.float()
    bool_mask = _bool_mask(kind, mask)
    cols, ent = flex_statistics(q.to(device), k.to(device), (lse32.to(device),) * 2,
                                None if bool_mask is None else bool_mask.to(device), SCALE, calls)  # fmt: skip
    cols, ent = cols.cpu(), ent.cpu()
    rtol = _swapped_cols_rtol(q.float(), k.float(), lse32.where(lse32.isfinite(), 0.0), cols, SCALE, length)
    assert_close(cols, want_cols, rtol=rtol, atol=0.0, label="flex cols, bf16", kind="bound")
    # Bound: Σ_j c_j k_j·O′_j = Σ_ij A_ij·w_i·s_ij; each term's roundings (A_ij/c_j to bf16, u_i to bf16, O′_j to
    # bf16: 3·2^-8; the float32 sums over T and D terms: (T + D + 8)·2^-24; c_j: the cols bound) act on Σ|terms|,
    # and Σ w_i·lse_i on its float32 lse: 4·2^-24·Σ w_i|lse_i|.
    s = _scores(q, k)
    A = torch.exp(s - lse.double().unsqueeze(-1)).masked_fill(~mask[:, None], 0.0)
    w = 1.0 / torch.log1p(torch.arange(length, dtype=torch.float64).clamp_min(1.0))
    w[0] = 0.0
    terms = (A * s.abs() * w.view(1, 1, -1, 1)).sum((-1, -2))
    rows = (w * lse.double().nan_to_num(0.0, neginf=0.0).abs()).sum(-1)
    bound = (3 * UBF16 + (length + dim + 8) * U32 + rtol) * terms + 4 * U32 * rows
    assert_within(ent, want_ent, bound, label="flex entropy, bf16")


@pytest.mark.numerics
@pytest.mark.parametrize("kind", ["causal", "padded"])
def test_flex_statistics_in_bfloat16_within_the_derived_bound(kind: str) -> None:
    """The model's bf16 tensors in, float32 lse as the forward kernels give it (`check_bf16`), flex uncompiled on
    the cpu."""
    check_bf16(kind, FlexCalls(swapped_call), torch.device("cpu"))


def _blocks(num: torch.Tensor, idx: torch.Tensor, n: int) -> torch.Tensor:
    """[n,n] bool: the blocks a `BlockMask`'s (counts, indices) list for its one batch and head."""
    dense = torch.zeros(n, n, dtype=torch.bool)
    for m in range(n):
        dense[m, idx[0, 0, m, : int(num[0, 0, m])].long()] = True
    return dense


@pytest.mark.parametrize(("length", "block"), [(37, 16), (48, 16), (1, 16), (300, 128)])
def test_the_causal_block_mask_is_the_one_create_block_mask_makes(length: int, block: int) -> None:
    """`upper_block_mask` (from its blocks, O((T/block)²)) lists the same partial and full blocks as
    `create_block_mask` evaluating the mask on every pair, T a multiple of the block or not."""
    got = upper_block_mask(length, torch.device("cpu"), block)
    want = flex.FLEX.create_block_mask(flex._upper, None, None, length, length, device="cpu", BLOCK_SIZE=block)
    n = -(-length // block)
    assert torch.equal(_blocks(got.kv_num_blocks, got.kv_indices, n), _blocks(want.kv_num_blocks, want.kv_indices, n))
    full = (got.full_kv_num_blocks, got.full_kv_indices)
    assert torch.equal(_blocks(*full, n), _blocks(want.full_kv_num_blocks, want.full_kv_indices, n))
    assert got.seq_lengths == (length, length) and torch.equal(got.to_dense(), want.to_dense())


def test_the_padding_block_mask_lists_every_block_with_a_visible_pair() -> None:
    """`masked_block_mask` of a left-padded batch: swapped block (m, n) is listed (partial or full) iff some key j
    in block m is seen by some query i in block n, and full iff every pair of the block is visible (the padding
    past T counts as hidden, so a ragged last block is partial, as in `create_block_mask`)."""
    mask = _mask("padded")[:, None]  # [B,1,T,T]
    got = flex.masked_block_mask(mask, block=16)
    n = -(-T // 16)
    pad = torch.zeros(2, n * 16, n * 16, dtype=torch.bool)
    pad[:, :T, :T] = mask[:, 0].transpose(-1, -2)  # swapped: rows are keys j, columns queries i
    tiles = pad.view(2, n, 16, n, 16)
    for b in range(2):
        one = slice(b, b + 1)  # one sequence's block lists
        partial = _blocks(got.kv_num_blocks[one], got.kv_indices[one], n)
        full = _blocks(got.full_kv_num_blocks[one], got.full_kv_indices[one], n)
        assert torch.equal(partial | full, tiles[b].any(-1).any(-2))
        assert torch.equal(full, tiles[b].all(-1).all(-2))


def test_flex_never_applies_on_the_cpu() -> None:
    """The cpu keeps its own `full` paths (blocked, swapped call), whose numbers do not change."""
    q, k = _grouped(1, 4, 2, 8, 16, seed=0)
    assert not flex_applies(q, k, None)
    assert not flex_applies(q, k, torch.ones(1, 1, 8, 8, dtype=torch.bool))


def test_a_new_session_and_new_tensors_reuse_the_compiled_call() -> None:
    """The bias and the boolean mask are inputs of the compiled graph, and a new session's compile wrapper finds
    the process's compiled code: layers and sessions after the first compile nothing (dynamo's counters; the
    "eager" backend has the same guards as inductor without its compile time)."""
    from torch._dynamo.utils import counters

    graphs = []
    for kind in ("causal", "causal", "padded", "padded", "padded"):
        calls = FlexCalls(torch.compile(swapped_call, backend="eager"))  # a new session's wrapper
        q, k, mask, _ = _inputs(kind, False, torch.float32)
        mask[1, :, 7] = kind == "padded" and len(graphs) == 4  # another mask tensor's values: same graph
        lse = torch.logsumexp(_scores(q, k).masked_fill(~mask[:, None], float("-inf")), -1).float()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            flex_statistics(q, k, (lse, lse), _bool_mask(kind, mask), SCALE, calls)
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[1] == graphs[0] and graphs[3] == graphs[2] == graphs[4]


@pytest.mark.numerics
@pytest.mark.parametrize("family", ["llama", "mistral-window"])
def test_a_trace_through_flex_equals_the_exact_chunked_trace(family: str, monkeypatch) -> None:
    """`fused_layer` with the flex path forced on (the cpu stands in for CUDA, flex uncompiled, the blocked path
    off): a float64 model, causal (llama) or with a sliding-window boolean mask (mistral, window 6), gives the
    chunked path's row entropies and column means, and each layer is noted "flash+flex" (the output's kernel, then
    the statistics call)."""
    from attnlab.tracing.fast import fused
    from tests.real.families import tiny_family

    model = tiny_family(family, num_attention_heads=2, num_key_value_heads=1).double()  # head size 16: flex's least
    ids = torch.randint(3, 64, (2, T), generator=torch.Generator().manual_seed(1))
    want = attnlab.trace(model, ids, stats="chunked")
    monkeypatch.setattr(flex, "flex_applies", lambda *a: True)
    monkeypatch.setattr(fused, "_full_rows_apply", lambda *a: False)
    monkeypatch.setattr(FlexCalls, "compiled", classmethod(lambda cls: cls(swapped_call)))
    got = attnlab.trace(model, ids, stats="full")
    assert got.attention_paths == ["flash+flex"] * len(got.attention_paths)
    # Bound: the forward kernel's lse comes in float32 (u = 2^-24) into a float64 computation: each A_ij off by
    # u·|lse_i| relatively, each H_i by u·|lse_i| absolutely (and a float32 score of 16 terms: 18·u·|s|); |lse| and
    # |s| stay below 20 here, so 2·(20 + 18·20)·u bounds both the column means (≤ 1) and the mean entropies (≤ 1).
    tol = 2 * (20 + 18 * 20) * U32
    assert_close(got.attn_col_mean, want.attn_col_mean, rtol=0.0, atol=tol, label="flex trace cols", kind="bound")
    assert_close(got.row_entropy, want.row_entropy, rtol=0.0, atol=tol, label="flex trace entropy", kind="bound")
