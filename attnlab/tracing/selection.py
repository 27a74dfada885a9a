"""The exact lower median of a residual stream's |x| (`lower_median`), by the faster of two exact selections on
this machine (`faster_method`); used by `TraceRecorder.residual` (spec extreme-tokens §5: massive activations are
> 1000 × this median). On an accelerator, the whole stream's statistics stay on the device (`device_stream_stats`);
on the cpu with numba, fused passes compute them (`cpu_stream_stats`).
"""

from __future__ import annotations

import sys
import time
from typing import NamedTuple

import numpy as np
import torch

from attnlab.tracing.fast import entries_over, kernels_available, stream_stats

# The float32 bit pattern's high 16 bits (sign, 8 exponent and 7 mantissa bits: 128 buckets per octave) are its
# second int16 on a little-endian machine, read through a strided view with no pass over the array.
HIGH_HALF = 1 if sys.byteorder == "little" else 0


def faster_method(values: np.ndarray, repeats: int = 2) -> str:
    """ "select" or "radix", whichever finds the median of `values` (left unchanged) faster on this machine: the
    best of `repeats` timings of each on copies. Both are exact, so the choice moves time only. Measured per host,
    not guessed from CPU flags: on one AMD EPYC VM the radix step was 3.5× faster than numpy's introselect (0.59
    against 2.06 ms a [512, 576] stream), on another (same numpy 2.4, AVX2) 2.4× slower (1.6 against 0.7 ms a
    real SmolLM2 stream), and on an Intel Xeon with AVX-512 2.2× slower (0.61 against 0.28 ms)."""
    best = {}
    for method in ("select", "radix"):
        times = []
        for _ in range(repeats):
            scratch = values.copy()
            t0 = time.perf_counter()
            lower_median(scratch, in_place=True, method=method)
            times.append(time.perf_counter() - t0)
        best[method] = min(times)
    return min(best, key=best.__getitem__)


def lower_median(values: np.ndarray, in_place: bool = False, method: str = "select") -> float:
    """Element (n−1)//2 of the sorted 1-D array `values` (torch.median's lower-middle convention), exactly.

    Two exact selections (`faster_method` picks one for a machine; the recorder times both on its first stream):
    - "select": numpy's introselect (`ndarray.partition`), in place when `in_place` (the caller's scratch: its
      order is lost), else on a copy.
    - "radix": for non-negative float32 (|x| of a residual stream) the IEEE bit patterns, read as integers, sort as
      the values do, so one radix step finds the median: a histogram of the top 16 bits (torch's `bincount` on
      the bit patterns' high int16 halves, a strided view: no shifted copy), the bucket whose cumulative count
      passes (n−1)//2, and numpy's introselect on that bucket's entries (about 1 % of them). Hand-written because
      on some hosts no library call selects as fast (0.76 against 2.06 ms for `np.partition` on a [512, 576]
      stream on one AMD EPYC VM, 0.54 against 1.6 ms on a Zen 4 one; `torch.median` and `torch.kthvalue` were
      slower still); on others numpy's introselect wins (`faster_method`). Other dtypes, small arrays and
      negatives (a set sign bit: a negative high half) take the introselect.
    NaN sorts last, as in numpy."""
    k = (values.size - 1) // 2
    if method != "radix" or values.dtype != np.float32 or values.size < 4096 or not values.flags.c_contiguous:
        if in_place:
            values.partition(k)
            return float(values[k])
        return float(np.partition(values, k)[k])
    bucket = torch.from_numpy(values.reshape(-1).view(np.int16)[HIGH_HALF::2])  # [n] the top 16 bits
    if int(bucket.min()) < 0:  # a negative number or −0.0 (inf and positive NaNs sort last, as in numpy)
        return float(np.partition(values, k)[k])
    counts = torch.cumsum(torch.bincount(bucket), 0)
    j = int(torch.searchsorted(counts, k, right=True))  # first bucket holding more than k entries
    below = int(counts[j - 1]) if j else 0
    cand = values[(bucket == j).numpy()]
    return float(np.partition(cand, k - below)[k - below])


class StreamStats(NamedTuple):
    """One residual stream's reductions (`TraceRecorder.residual`): norm_sum [T] float64 on the cpu, Σ_b ‖x_bt‖;
    the first maximum of |x| (flat index into [B,T,d], value); the lower median of |x|; the entries over the
    massive threshold max(abs, rel × median), flat indices in index order with their values (numpy)."""

    norm_sum: torch.Tensor
    flat: int
    max_abs: float
    median: float
    idx: np.ndarray
    values: np.ndarray


def device_stream_stats(x: torch.Tensor, massive_abs: float, massive_rel: float) -> StreamStats:
    """`StreamStats` of a float stream x [B,T,d] computed where x lives: on a GPU every reduction runs there and
    only scalars and the few massive entries come back (copying a T = 131,072 stream to the host and selecting its
    median there would cost more than the forward). torch's argmax gives the first maximum and torch.median the
    lower-middle element, the host path's conventions; a stream holding NaN has median NaN here (the host's
    selection sorts NaN last)."""
    norms = torch.linalg.vector_norm(x, dim=-1).double().sum(0).cpu()
    ax = x.abs().reshape(-1)
    flat = int(torch.argmax(ax))
    m = float(ax[flat])
    med = float(torch.median(ax))
    thresh = max(massive_abs, massive_rel * med)
    if not m > thresh:
        empty = np.zeros(0, dtype=np.int64)
        return StreamStats(norms, flat, m, med, empty, np.zeros(0, dtype=np.float32))
    idx = torch.nonzero(ax > thresh).squeeze(1)
    return StreamStats(norms, flat, m, med, idx.cpu().numpy(), x.reshape(-1)[idx].cpu().numpy())


def device_stream_tensors(x: torch.Tensor, keep: int) -> torch.Tensor:
    """One float stream x [B,T,d] reduced where it lives into one float64 vector on its device, read back later with
    other streams' in one transfer (`stream_from_vector`; issue 41 item 2: no synchronisation per statistic):
    [Σ_b ‖x_bt‖ (T), the first maximum's flat index, max |x|, the lower median of |x|, the `keep` largest |x|'s flat
    indices (k = min(keep, B·T·d)), their values]. The massive entries are then those of the k over the threshold:
    the host path keeps the largest `keep` over it too, so both agree except in which of several entries of exactly
    equal magnitude at the cap's edge are kept (the host keeps the earlier)."""
    B, T, d = x.shape
    norms = torch.linalg.vector_norm(x, dim=-1).double().sum(0)  # [T]
    ax = x.abs().reshape(-1)
    flat = torch.argmax(ax)  # the first maximum
    k = min(keep, ax.numel())
    top = torch.topk(ax, k).indices
    head = torch.stack([flat.double(), ax[flat].double(), torch.median(ax).double(), ax.new_tensor(k).double()])
    return torch.cat([norms, head, top.double(), x.reshape(-1)[top].double()])


def stream_from_vector(v: torch.Tensor, seq_len: int, massive_abs: float, massive_rel: float) -> StreamStats:
    """`StreamStats` of a stream from its `device_stream_tensors` vector v (on the cpu) for sequences of `seq_len`:
    the massive entries are the kept ones over max(massive_abs, massive_rel × median), in index order."""
    T = seq_len
    flat, m, med, k = (float(t) for t in v[T : T + 4])
    idx = v[T + 4 : T + 4 + int(k)].numpy().astype(np.int64)
    values = v[T + 4 + int(k) : T + 4 + 2 * int(k)].numpy().astype(np.float32)
    thresh = max(massive_abs, massive_rel * med)
    over = np.abs(values) > thresh if m > thresh else np.zeros(idx.size, dtype=bool)
    order = np.argsort(idx[over], kind="stable")
    return StreamStats(v[:T].clone(), int(flat), m, med, idx[over][order], values[over][order])


def cpu_stream_stats(x: torch.Tensor, massive_abs: float, massive_rel: float) -> StreamStats | None:
    """`StreamStats` of a float32 stream x [B,T,d] on the cpu by `tracing.fast.stream_stats` (one pass for the norms,
    the first maximum and the median's histogram, one more for the median's bucket); None where numba is missing or
    the stream holds a NaN (the recorder's numpy path then runs). The massive entries, over max(massive_abs,
    massive_rel × median), are read only when the maximum passes that threshold."""
    if not kernels_available() or x.dtype != torch.float32:
        return None
    B, T, d = x.shape
    flat_x = x.reshape(B * T, d).contiguous().numpy()
    got = stream_stats(flat_x)
    if got is None:
        return None
    sumsq, flat, m, med = got
    norms = torch.from_numpy(np.sqrt(sumsq).reshape(B, T).sum(0))
    thresh = max(massive_abs, massive_rel * med)
    idx = entries_over(flat_x, thresh) if m > thresh else np.zeros(0, dtype=np.int64)
    return StreamStats(norms, flat, m, med, idx, flat_x.reshape(-1)[idx])
