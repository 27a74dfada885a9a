"""The fused cpu reductions (`attnlab.tracing.fast.cpu_kernels`, numba) against their torch/numpy references: the same
maxima, medians and indices exactly, the same sums up to float rounding, and the same `Trace` from a scan with
and without them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.tracing.fast import cpu_kernels, statistics
from attnlab.tracing.recorder import MASSIVE_ABS, MASSIVE_REL, TraceRecorder
from attnlab.tracing.selection import cpu_stream_stats
from tests.numerics import assert_close
from tests.real.rounding import U32, U64, assert_within

pytestmark = pytest.mark.skipif(not cpu_kernels.AVAILABLE, reason="numba is not installed")


def _stream(case: str, shape: tuple[int, int] = (300, 48)) -> np.ndarray:
    g = np.random.default_rng(3)
    x = (g.standard_normal(shape) * g.random(shape[1]) * 3).astype(np.float32)
    if case == "tied":  # two equal maxima of |x|, opposite signs: the first in index order
        x[9, 4], x[200, 0] = -5000.0, 5000.0
    elif case == "zeros":  # half the entries 0.0 or −0.0: the median is 0
        x[: shape[0] // 2 + 1] = 0.0
        x[0, :5] = -0.0
    elif case == "inf":
        x[17, 3] = -np.inf
    elif case == "constant":
        x[:] = 2.5
    return x


@pytest.mark.numerics
@pytest.mark.parametrize("case", ["random", "tied", "zeros", "inf", "constant", "one-row", "one-entry"])
def test_stream_stats_equal_numpy(case):
    """Sums of squares (float64) to 1e-12, and the first maximum of |x|, its value and the lower median of |x|
    (element (n−1)//2 of the sorted |x|, torch.median's convention) exactly."""
    shape = {"one-row": (1, 48), "one-entry": (1, 1)}.get(case, (300, 48))
    x = _stream(case if case not in ("one-row", "one-entry") else "random", shape)
    sumsq, flat, m, med = cpu_kernels.stream_stats(x)
    ax = np.abs(x).reshape(-1)
    assert flat == int(np.argmax(ax)) and m == float(ax.max())
    assert med == float(np.sort(ax)[(ax.size - 1) // 2])
    assert med == float(torch.median(torch.from_numpy(ax)))
    ref = (x.astype(np.float64) ** 2).sum(1)
    # Float64 sums of d = 48 nonnegative squares of float32 values (exact) in two orders: 2·(d + 1)·2^-53 relative
    # (was 1e-12).
    assert_close(sumsq, ref, rtol=2 * (x.shape[1] + 1) * U64, label="stream sumsq", kind="bound")
    if case == "tied":
        assert flat == 9 * 48 + 4


def test_stream_stats_leave_nan_to_the_reference_path():
    x = _stream("random")
    x[5, 5] = np.nan
    assert cpu_kernels.stream_stats(x) is None


@pytest.mark.numerics
@pytest.mark.parametrize("case", ["random", "massive", "tied"])
def test_fused_stream_stats_equal_the_numpy_path(case, monkeypatch):
    """The recorder's fused residual statistics against its numpy path on the same [B,T,d] stream: norms up to
    float32 rounding (float64 against float32 sums), everything else exactly, massive entries included."""
    x = torch.from_numpy(_stream("tied" if case == "tied" else "random", (600, 48))).view(2, 300, 48).clone()
    if case == "massive":
        x[0, 0, 7], x[1, 0, 7], x[1, 40, 3] = 4000.0, -2500.0, 3000.0
        x[0, 5, 1] = 150.0  # over MASSIVE_ABS, under MASSIVE_REL × the median: not massive
    fused = cpu_stream_stats(x, MASSIVE_ABS, MASSIVE_REL)
    monkeypatch.setattr(cpu_kernels, "AVAILABLE", False)
    ref = TraceRecorder(1, 2, 300)._host_stream_stats(x)
    # float64 sums against torch's float32 ones: within the float32 bound d·2⁻²⁴ (d = 48: 2.9e-6)
    assert_close(fused.norm_sum, ref.norm_sum, rtol=48 * U32, label="fused norm sum", kind="bound")
    assert (fused.flat, fused.max_abs, fused.median) == (ref.flat, ref.max_abs, ref.median)
    assert np.array_equal(fused.idx, ref.idx) and np.array_equal(fused.values, ref.values)
    if case == "massive":
        assert fused.idx.tolist() == [7, 300 * 48 + 7, 300 * 48 + 40 * 48 + 3]


def _logit_bounds(q: torch.Tensor, k: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The float32 bounds (u = 2^-24, any summation order) of s_t0 and of the mean logit of one computation against
    the exact values: (D + 2)·u·scale·Σ_d|q_td·k_0d| and (t + D + 2)·u·scale·Σ_d|q_td|·Σ_{j=1}^{t−1}|k_jd| / (t − 1)
    (a dot product over D terms, a sum of t − 1 keys, the scaling and the division; see tests/tracing/
    test_fused_stats.py). Two computations are within twice these of each other."""
    T, D = q.shape[2], q.shape[-1]
    qa = q.double().abs()
    ka = k.double().abs().repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    b0 = (D + 2) * U32 * scale * (qa * ka[:, :, :1]).sum(-1)
    t = torch.arange(T, dtype=torch.float64).clamp_min(2)
    zero = torch.zeros_like(ka[:, :, :1])
    ksum = torch.cat([zero, zero, ka[:, :, 1 : T - 1].cumsum(2)], 2)[:, :, :T]  # Σ_{j=1}^{t-1}|k_j| at row t
    return b0, (t + D + 2) * U32 * scale * (qa * ksum).sum(-1) / (t - 1)


@pytest.mark.numerics
@pytest.mark.parametrize("shape", [(1, 9, 3, 1), (2, 4, 4, 7), (2, 8, 2, 33), (1, 6, 1, 130)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logit_stats_equal_the_blocked_torch_path(shape, dtype, monkeypatch):
    """s_t0 and the mean logit over keys 1..t−1 from the fused sweep against the blocked torch path, grouped KV
    heads and t < 2 included, on q and k as the projections lay them out ([B,T,H,d] under [B,H,T,d] views)."""
    B, H, Hkv, T = shape
    g = torch.Generator().manual_seed(sum(shape))
    q = torch.randn(B, T, H, 16, generator=g).to(dtype).transpose(1, 2)
    k = torch.randn(B, T, Hkv, 16, generator=g).to(dtype).transpose(1, 2)
    s0, rest = statistics.logit_stats(q, k, 0.25)
    ref0, ref_rest = statistics.logit_stats_blocked(q, k, 0.25)
    assert s0.shape == rest.shape == (B, H, T)
    b0, b_rest = _logit_bounds(q, k, 0.25)  # was rtol = atol = 1e-5 for every comparison here
    assert_within(s0, ref0, 2 * b0, label="fused s_t0")
    assert_within(rest, ref_rest, 2 * b_rest, label="fused mean logit")
    assert torch.all(rest[..., :2] == 0)
    # the definition, by brute force: q_t·k_j·scale for every key j, averaged over 1..t−1 (float32: within the same
    # bounds of the exact values, so within twice them of the fused sweep's)
    s = torch.einsum("bhtd,bhjd->bhtj", q.float(), k.float().repeat_interleave(H // Hkv, dim=1)) * 0.25
    assert_within(s0, s[..., 0], 2 * b0, label="brute s_t0")
    for t in range(2, T):
        assert_within(rest[..., t], s[..., t, 1:t].mean(-1), 2 * b_rest[..., t], label="brute mean logit")


@pytest.mark.numerics
def test_scan_trace_is_the_same_without_numba(monkeypatch):
    """A traced forward of a tiny random Llama (grouped KV heads, massive entries planted in the embeddings) gives
    the same `Trace` with the fused cpu reductions and with the torch/numpy paths, up to float rounding."""
    from attnlab.api import trace
    from tests.real.families import tiny_family

    model = tiny_family("llama", num_key_value_heads=2)
    with torch.no_grad():
        model.get_input_embeddings().weight[5, 3] = 400.0
    ids = torch.randint(6, model.config.vocab_size, (2, 40), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = 5
    fast = trace(model, ids)
    monkeypatch.setattr(cpu_kernels, "AVAILABLE", False)
    ref = trace(model, ids)
    for name in ("logit_key0", "logit_rest", "attn_key0_by_query", "resid_norm", "median_abs", "max_abs"):
        # Whole float32 forwards, fused numba reductions against torch/numpy ones: observed 5.8e-3 of the tolerance
        # at most over the numerics matrix (172x inside), rtol 1e-5 and atol 1e-6 kept.
        assert_close(getattr(fast, name), getattr(ref, name), rtol=1e-5, atol=1e-6, label=f"no numba {name}",
                     kind="observed")  # fmt: skip
    assert np.array_equal(fast.max_pos, ref.max_pos) and np.array_equal(fast.max_dim, ref.max_dim)
    where = ["layer", "pos", "dim"]
    assert fast.massive[where].equals(ref.massive[where])
    assert len(fast.massive), "the planted entry is massive"


@pytest.mark.numerics
def test_row_logsumexp_equals_float64_with_inf_and_nan_rows():
    """`row_logsumexp` (head_nll's vocabulary blocks) against float64 torch.logsumexp: within 4e-7 relative on rows
    of logits spanning ~200, and the edge rows as torch gives them (−inf entries ignored, all −inf gives −inf, +inf
    gives +inf, NaN gives NaN, one column)."""
    g = np.random.default_rng(0)
    x = (g.standard_normal((9, 4099)) * 30).astype(np.float32)
    x[1, ::3] = -np.inf
    x[2] = -np.inf
    x[3, 7] = np.inf
    x[4, 100] = np.nan
    x[5, 4098] = -np.nan
    got = cpu_kernels.row_logsumexp(x)
    want = torch.logsumexp(torch.from_numpy(x).double(), -1).numpy()
    # A float32 sum of 4099 exponentials (3 ulp each) has a worst-case bound of 4102·2^-24 = 2.4e-4 on the log,
    # which says little: observed 2.3e-3 of rtol 4e-7 at most over the numerics matrix (430x inside), kept.
    assert_close(got, want, rtol=4e-7, label="row logsumexp", kind="observed")
    assert got[2] == -np.inf and got[3] == np.inf and np.isnan(got[4]) and np.isnan(got[5])
    one = x[:, :1].copy()
    # one column: m + log(1) = m exactly
    assert_close(cpu_kernels.row_logsumexp(one), one[:, 0], label="logsumexp one column", kind="bound")
