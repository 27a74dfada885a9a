"""Fused one-pass reductions for the default scan's O(T·d) statistics on the cpu (issue 23), compiled by numba.

Why hand-written: each statistic below is a few reductions over a tensor the forward has just written, and torch
runs each reduction as its own pass over memory (plus a temporary). Inside a forward, between the model's matrix
products, those passes cost about twice what they cost alone (caches hold the weights' panels, not the statistics'
inputs): the residual, logit and value-norm statistics took ~90 ms of a 1.2 s SmolLM2 window at T = 512, where the
same calls on the same tensors take ~50 ms in a loop of their own (benchmarks/RESULTS.md, eighth session). No
library call fuses "norm of every row, first maximum of |x| and a histogram of its bit patterns" into one pass, or
"q_i·k_0 and q_i·Σ_{j<i} k_j" into one sweep over the rows, so these loops do; numba compiles them (cached on
disk) into the vectorised code a C extension would be, with no compiler needed where the package is installed.

Every function has an exact reference in torch/numpy that the recorder uses when numba is missing (`AVAILABLE`
False: the GPU machine's python has no numba) or a case is out of their scope (NaN in a stream), and the tests
compare the two (tests/real/test_cpu_kernels.py). Single-threaded (nogil): numba's own thread pool would contend
with torch's intra-op threads on the same cores.
"""

from __future__ import annotations

import numpy as np

try:  # pragma: no branch - installed by the lock on the cpu; absent on the GPU machine
    import numba
    from llvmlite import ir
    from numba.extending import intrinsic

    AVAILABLE = True
except ImportError:  # pragma: no cover - the reference paths run instead
    AVAILABLE = False

ABS_BITS = 0x7FFFFFFF  # float32 bits without the sign: |x|'s bit pattern, ordered as |x| (NaN above +inf)
INF_BITS = 0x7F800000
N_BUCKETS = 1 << 15  # buckets of |x|'s high 16 bits (sign cleared): 8 exponent and 7 mantissa bits


def kernels_available() -> bool:
    """Whether numba compiled these loops (`AVAILABLE`, read at each call: tests switch it off to run the reference
    paths)."""
    return AVAILABLE


def _jit(fn):  # noqa: ANN001, ANN202 - a decorator
    """numba's njit (no GIL; sums may be reassociated into SIMD lanes and fused multiply-adds, as torch's own
    reductions are, but NaN and inf keep IEEE semantics), or the plain function when numba is missing (never called
    then: `AVAILABLE` gates callers). Compiled at the first call (~6 s for all of them) and cached on disk beside the
    module or in the user's cache folder; where neither is writable, numba refuses to cache and it is compiled in
    every process instead."""
    if not AVAILABLE:
        return fn
    options = {"nogil": True, "fastmath": {"reassoc", "contract"}}
    try:
        return numba.njit(cache=True, **options)(fn)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return numba.njit(**options)(fn)


@_jit
def _stream_pass(x, sumsq, hist):  # noqa: ANN001, ANN202
    """One pass over x [N, d] float32 (C order): sumsq [N] float64 = Σ_c x_rc² (accumulated in float64), hist
    [N_BUCKETS] int64 += counts of |x|'s high 16 bits; returns the flat index of the first entry with the largest
    |x| bit pattern (NaN above inf) and that pattern."""
    u = x.view(np.uint32)
    n, d = x.shape
    top = np.uint32(0)
    top_row = 0
    for r in range(n):
        s = 0.0
        m = np.uint32(0)
        for c in range(d):  # vectorised: the row's sum of squares and largest |x| pattern
            v = np.float64(x[r, c])
            s += v * v
            m = max(m, u[r, c] & np.uint32(ABS_BITS))
        sumsq[r] = s
        if m > top:  # the first row holding the largest pattern so far
            top, top_row = m, r
        for c in range(d):  # scalar scatter, over the row while it is in L1
            hist[(u[r, c] & np.uint32(ABS_BITS)) >> 16] += 1
    for c in range(d):
        if u[top_row, c] & np.uint32(ABS_BITS) == top:
            return top_row * d + c, top
    return 0, top  # x is empty


@_jit
def _bucket_median(x, hist):  # noqa: ANN001, ANN202
    """The lower median of |x| (element (n−1)//2 of the sorted |x|) as a bit pattern, from x [N, d] float32 and the
    histogram of its high 16 bits (`_stream_pass`): the bucket holding that rank, then its entries (~0.2 % of them
    in a SmolLM2 stream) gathered from the blocks of 64 that hold one, and selected."""
    k = (x.size - 1) // 2
    below = 0
    j = 0
    for j in range(N_BUCKETS):
        if below + hist[j] > k:
            break
        below += hist[j]
    u = x.reshape(-1).view(np.uint32)
    cand = np.empty(hist[j], dtype=np.uint32)
    c = 0
    jj = np.uint32(j)
    full = u.size // 64
    for b in range(full + 1):  # blocks of 64 (the last one partial)
        i0 = b * 64
        if b < full:  # vectorised test (a literal trip count): does the block hold an entry of bucket j?
            m = np.uint32(0xFFFFFFFF)
            for i in range(64):
                m = min(m, ((u[i0 + i] & np.uint32(ABS_BITS)) >> 16) ^ jj)
            if m != 0:
                continue
        for i in range(i0, min(u.size, i0 + 64)):
            a = u[i] & np.uint32(ABS_BITS)
            if a >> 16 == jj:
                cand[c] = a
                c += 1
    return np.partition(cand, k - below)[k - below]


def stream_stats(x: np.ndarray) -> tuple[np.ndarray, int, float, float] | None:
    """(sumsq [N] float64 Σ_c x_rc², the flat index of the first maximum of |x|, that maximum, the lower median of
    |x|) of a residual stream x [N, d] float32 in C order, exactly (the float64 sums up to rounding); None when x
    holds a NaN (the caller's reference path orders NaN as numpy does)."""
    sumsq = np.empty(x.shape[0])
    hist = np.zeros(N_BUCKETS, dtype=np.int64)
    flat, top = _stream_pass(x, sumsq, hist)
    if top > INF_BITS:
        return None
    med = np.array([_bucket_median(x, hist)], dtype=np.uint32).view(np.float32)[0]
    return sumsq, int(flat), float(np.array([top], dtype=np.uint32).view(np.float32)[0]), float(med)


@_jit
def _block_maxima(u, block):  # noqa: ANN001, ANN202
    """[ceil(n / block)] the largest |x| bit pattern of each block of `block` entries of u [n] (uint32 patterns)."""
    n = u.size
    full = n // block
    out = np.empty(full + (n % block > 0), dtype=np.uint32)
    for b in range(full):
        m = np.uint32(0)
        for i in range(b * block, (b + 1) * block):  # vectorised
            m = max(m, u[i] & np.uint32(ABS_BITS))
        out[b] = m
    if n % block:
        m = np.uint32(0)
        for i in range(full * block, n):
            m = max(m, u[i] & np.uint32(ABS_BITS))
        out[full] = m
    return out


@_jit
def _entries_over(x, above):  # noqa: ANN001, ANN202
    """Flat indices, in order, of the entries of x [N, d] float32 whose |x| bit pattern exceeds `above`: the
    blocks of 64 whose maximum does (`_block_maxima`, vectorised), then a scalar look into those blocks only."""
    u = x.reshape(-1).view(np.uint32)
    maxima = _block_maxima(u, 64)
    hit = np.flatnonzero(maxima > above)
    out = np.empty(64 * hit.size, dtype=np.int64)
    c = 0
    for b in hit:
        for i in range(b * 64, min(u.size, b * 64 + 64)):
            if (u[i] & np.uint32(ABS_BITS)) > above:
                out[c] = i
                c += 1
    return out[:c].copy()


def entries_over(x: np.ndarray, thresh: float) -> np.ndarray:
    """[n] int64 flat indices, in index order, of the entries of x [N, d] float32 (no NaN) with |x| > thresh ≥ 0.
    As bit patterns: |x| > thresh ⇔ pattern(|x|) > pattern(f) where f is thresh rounded to float32, or ≥ it when
    the rounding went up."""
    f = np.float32(thresh)
    bits = int(np.array([f], dtype=np.float32).view(np.uint32)[0])
    return _entries_over(x, np.uint32(bits - 1 if float(f) > thresh else bits))


@_jit
def _logit_rows(q, k, scale, out):  # noqa: ANN001, ANN202
    """out[0, b, t, h] = s_t0 = scale·q_t·k_0 and out[1, b, t, h] = scale·q_t·(Σ_{j=1}^{t−1} k_j)/(t−1) (0 at t < 2),
    for q [B,T,H,D] and k [B,T,H_kv,D] float32 (query head h reads KV head h ÷ (H/H_kv)); the running key sums and
    the dot products in float64."""
    B, T, H, D = q.shape
    Hkv = k.shape[2]
    G = H // Hkv
    ksum = np.zeros((Hkv, D))
    for b in range(B):
        ksum[:] = 0.0
        for t in range(T):
            for h in range(H):
                g = h // G
                s0 = 0.0
                sr = 0.0
                for c in range(D):
                    qv = np.float64(q[b, t, h, c])
                    s0 += qv * k[b, 0, g, c]
                    sr += qv * ksum[g, c]
                out[0, b, t, h] = s0 * scale
                out[1, b, t, h] = sr * scale / (t - 1) if t >= 2 else 0.0
            if t >= 1:
                for g in range(Hkv):
                    for c in range(D):
                        ksum[g, c] += k[b, t, g, c]


def logit_stats(q: np.ndarray, k: np.ndarray, scale: float) -> np.ndarray:
    """[2, B, T, H] float32: s_t0 and the mean logit over keys 1..t−1 (spec extreme-tokens §5) of q [B,T,H,D] and
    k [B,T,H_kv,D] float32 (any strides)."""
    B, T, H, _ = q.shape
    out = np.empty((2, B, T, H), dtype=np.float32)
    _logit_rows(q, k, float(scale), out)
    return out


@_jit
def _head_norms(y, D, out):  # noqa: ANN001, ANN202
    """out[b, t, g·G + r] = ‖y[b, g, t, r·D:(r+1)·D]‖ for y [B,H_kv,T,G·D] float32 (sums of squares in float64)."""
    B, Hkv, T, GD = y.shape
    G = GD // D
    for b in range(B):
        for g in range(Hkv):
            for t in range(T):
                row = y[b, g, t]
                for r in range(G):
                    seg = row[r * D : (r + 1) * D]
                    s = 0.0
                    for c in range(D):  # vectorised
                        v = np.float64(seg[c])
                        s += v * v
                    out[b, t, g * G + r] = np.sqrt(s)


def head_norms(y: np.ndarray, head_dim: int) -> np.ndarray:
    """[B, T, H] float32 norms of each head's slice of y [B,H_kv,T,G·d_h] (`hf_attention._value_norms`)."""
    B, Hkv, T, GD = y.shape
    out = np.empty((B, T, Hkv * (GD // head_dim)), dtype=np.float32)
    _head_norms(y, head_dim, out)
    return out


# ---- stats="full": exact softmax rows with their statistics (issue 23) ------------------------------------------
# Why hand-written: the full-row statistics (every column sum Σ_i A_ij and every row entropy) need each row's
# normaliser before its weights can be summed down the columns, so no fused attention kernel in torch returns them;
# the swapped second call that computes them exactly costs one more attention a layer (1.45× a forward at T = 4096).
# Here the forward's own attention is computed by query blocks instead: torch's GEMMs give the block's scores, and
# one call below turns each row into its softmax in place (three passes over a row in L1/L2), summing its columns
# and its entropy on the way, so that the statistics cost a fraction of the exponentials the forward needs anyway.
LOG2E = 1.4426950408889634
LN2_HI = 0.693359375  # ln 2 split in two (Cody-Waite): n·LN2_HI is exact for |n| < 2^10
LN2_LO = -2.12194440e-4
EXP_FLOOR = -87.0  # exp(−87) ≈ 1.6e-38, still a normal float32: below it the weight is taken as that (≤ 1.6e-38)


def _f32_bits(typingctx, x):  # noqa: ANN001, ANN202
    """The bits of a float32 as an int32 (an intrinsic: a bitcast that vectorises, unlike a view per scalar)."""
    return numba.int32(numba.float32), lambda context, builder, sig, args: builder.bitcast(args[0], ir.IntType(32))


def _bits_f32(typingctx, x):  # noqa: ANN001, ANN202
    """The float32 whose bits are the int32 x (an intrinsic, as `_f32_bits`)."""
    return numba.float32(numba.int32), lambda context, builder, sig, args: builder.bitcast(args[0], ir.FloatType())


if AVAILABLE:  # pragma: no branch
    _f32_bits, _bits_f32 = intrinsic(_f32_bits), intrinsic(_bits_f32)


def _inline(fn):  # noqa: ANN001, ANN202
    """`_jit`, inlined into its callers (so that their loops vectorise through it)."""
    if not AVAILABLE:
        return fn
    return numba.njit(nogil=True, fastmath={"reassoc", "contract"}, inline="always")(fn)


@_inline
def _exp_nonpositive(x):  # noqa: ANN001, ANN202
    """exp(x) for float32 x ≤ 0 (x < EXP_FLOOR as EXP_FLOOR), within 3 ulp (0.93 measured): x = n·ln 2 + y with
    |y| ≤ ln 2 / 2, e^y by its Taylor polynomial of degree 7 (remainder < 3e-8 relative), 2^n built from its
    exponent bits. libm's expf does not vectorise under numba without Intel's SVML; this loop body does."""
    x = max(x, np.float32(EXP_FLOOR))
    t = np.floor(x * np.float32(LOG2E) + np.float32(0.5))
    y = x - t * np.float32(LN2_HI) - t * np.float32(LN2_LO)
    p = np.float32(1.0 / 5040.0)
    p = p * y + np.float32(1.0 / 720.0)
    p = p * y + np.float32(1.0 / 120.0)
    p = p * y + np.float32(1.0 / 24.0)
    p = p * y + np.float32(1.0 / 6.0)
    p = p * y + np.float32(0.5)
    p = p * y + np.float32(1.0)
    p = p * y + np.float32(1.0)
    return p * _bits_f32((np.int32(t) + np.int32(127)) << np.int32(23))


@_inline
def _row_max(row, n):  # noqa: ANN001, ANN202
    """max(row[:n]) of float32 row, n ≥ 1, as the maximum of the bit patterns mapped to ordered int32 (an integer
    maximum vectorises; numba's float max does not)."""
    m = np.int32(-2147483648)
    for j in range(n):
        b = _f32_bits(row[j])
        m = max(m, b ^ ((b >> np.int32(31)) & np.int32(0x7FFFFFFF)))
    return _bits_f32(m ^ ((m >> np.int32(31)) & np.int32(0x7FFFFFFF)))


@_jit
def _softmax_rows(S, ld, K, q0, G, g, col, ent, lse, inv_z, part):  # noqa: ANN001, ANN202
    """In place on S [C·G, K] float32 (the rows of a flat buffer, `ld` entries apart), the scaled scores of queries
    q0..q0+C−1 of the G query heads g·G..g·G+G−1 (row c·G + r: query q0 + c, head g·G + r) against keys 0..K−1:
    each row becomes exp(s_ij − m_i) over keys j ≤ i (0 beyond; m_i the row maximum), with inv_z[row] = 1/Z_i,
    Z_i = Σ_j exp(s_ij − m_i), so that A = S·inv_z.
    Adds Σ_i A_ij to col[h, j] (float64; summed in float32 over the block's rows in part [G, K] first), H_i / log(i+1)
    to ent[h] (i ≥ 1; float64) and writes lse[h, i] = m_i + log Z_i; H_i = log Z_i − Σ_j A_ij (s_ij − m_i) (spec
    extreme-tokens §5)."""
    C = inv_z.size // G
    part[:, :K] = 0.0
    for c in range(C):
        i = q0 + c
        n = i + 1
        for r in range(G):
            row = S[(c * G + r) * ld : (c * G + r) * ld + K]
            m = _row_max(row, n)
            z = np.float32(0.0)
            d = np.float32(0.0)
            for j in range(n):  # vectorised: the exponentials, their sum and their scores' weighted sum
                x = row[j] - m
                e = _exp_nonpositive(x)
                row[j] = e
                z += e
                d += e * x
            inv = np.float32(1.0) / z
            acc = part[r]
            for j in range(n):
                acc[j] += row[j] * inv
            row[n:] = 0.0
            inv_z[c * G + r] = inv
            log_z = np.log(np.float64(z))
            lse[g * G + r, i] = m + log_z
            if i >= 1:
                ent[g * G + r] += (log_z - np.float64(d) / z) / np.log(i + 1.0)
    for r in range(G):
        dst = col[g * G + r]
        for j in range(K):
            dst[j] += part[r, j]


def softmax_rows(
    S: np.ndarray, q0: int, G: int, g: int, stats: tuple[np.ndarray, np.ndarray, np.ndarray], inv_z: np.ndarray,
    part: np.ndarray,
) -> None:  # fmt: skip
    """`_softmax_rows` on a block S [C·G, K] float32 whose rows are contiguous (any row stride) with K ≥ q0 + C:
    stats = (col [H, T] and ent [H] float64 accumulators, lse [H, T] float32), inv_z [C·G] and part [G, ≥K]
    float32 scratch (fused.full_rows_attention)."""
    col, ent, lse = stats
    n, K = S.shape
    ld = S.strides[0] // 4 if n > 1 else K
    flat = np.lib.stride_tricks.as_strided(S, shape=((n - 1) * ld + K,), strides=(4,))
    _softmax_rows(flat, ld, K, q0, G, g, col, ent, lse, inv_z[:n], part)


@_jit
def _row_logsumexp(x, out):  # noqa: ANN001, ANN202
    """out[r] = log Σ_j exp x_rj (float64) of x [n, m] float32: the row maximum m_r, then Σ_j exp(x_rj − m_r) in
    one vectorised pass while the row is in L1. A NaN anywhere gives NaN; a row whose maximum is ±inf gives it."""
    n, m = x.shape
    for r in range(n):
        row = x[r]
        top = _row_max(row, m)
        if np.isinf(top):
            out[r] = top
            continue
        z = np.float32(0.0)
        nan = 0
        for j in range(m):
            v = row[j]
            nan |= v != v
            z += _exp_nonpositive(v - top)
        out[r] = np.nan if nan or top != top else top + np.log(np.float64(z))


def row_logsumexp(x: np.ndarray) -> np.ndarray:
    """[n] float64 log-sum-exp of each row of x [n, m] float32 (C order), m ≥ 1 (head_nll's vocabulary blocks:
    one pass a row instead of torch's four over the block; the exponentials within 3 ulp)."""
    out = np.empty(x.shape[0])
    _row_logsumexp(x, out)
    return out
