"""The exact lower median of a residual stream's |x| (`lower_median`), by the faster of two exact selections on
this CPU; used by `TraceRecorder.residual` (spec extreme-tokens §5: massive activations are > 1000 × this median).
"""

from __future__ import annotations

import numpy as np
import torch

RADIX_SHIFT = 18  # float32 bits >> 18: sign, 8 exponent and 5 mantissa bits, 8,192 buckets (32 per octave)


def simd_select() -> bool:
    """Whether numpy's `partition` runs on x86-simd-sort's AVX-512 introselect on this CPU (numpy ≥ 2 reports the
    AVX512_SKX feature): there it selects a [512, 576] stream in place in 0.28 ms, against 0.61 ms for the radix
    step below (2 threads, this project's Intel Xeon VM, 2026-12-02). Without AVX-512 (the AMD EPYC VMs this project
    also ran on) numpy's partition is the scalar introselect, 3× slower than the radix step (2.06 against 0.59 ms)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x: the scalar partition
        return False
    return bool(features.get("AVX512_SKX"))


def lower_median(values: np.ndarray, in_place: bool = False, method: str = "auto") -> float:
    """Element (n−1)//2 of the sorted 1-D array `values` (torch.median's lower-middle convention), exactly.

    Two exact selections, chosen by the CPU (`method="auto"`; "select" or "radix" force one, for tests):
    - "select": numpy's introselect (`ndarray.partition`), in place when `in_place` (the caller's scratch: its
      order is lost), else on a copy; the fast one where numpy has AVX-512 (`simd_select`).
    - "radix": for non-negative float32 (|x| of a residual stream) the IEEE bit patterns, read as int32, sort as the
      values do, so one radix step finds the median: a histogram of the top 14 bits (torch's `bincount`), the
      bucket whose cumulative count passes (n−1)//2, and numpy's introselect on that bucket's few percent of the
      entries. Hand-written because no library call selects this fast on a CPU without AVX-512 (0.76 against 2.06
      ms for `np.partition` on a [512, 576] stream on AMD EPYC, which in turn beat `torch.median` and
      `torch.kthvalue`). Other dtypes, small arrays and negatives take the introselect.
    NaN sorts last, as in numpy."""
    k = (values.size - 1) // 2
    radix = method == "radix" or (method == "auto" and not simd_select())
    if not radix or values.dtype != np.float32 or values.size < 4096:
        if in_place:
            values.partition(k)
            return float(values[k])
        return float(np.partition(values, k)[k])
    bits = torch.from_numpy(values).view(torch.int32)
    bucket = bits >> RADIX_SHIFT
    if int(bucket.min()) < 0:  # a negative number or −0.0 (inf and positive NaNs sort last, as in numpy)
        return float(np.partition(values, k)[k])
    counts = torch.cumsum(torch.bincount(bucket.reshape(-1)), 0)
    j = int(torch.searchsorted(counts, k, right=True))  # first bucket holding more than k entries
    below = int(counts[j - 1]) if j else 0
    cand = values[(bucket == j).numpy()]
    return float(np.partition(cand, k - below)[k - below])
