"""Unit roundoffs and Higham's bounds for the derived tolerances of the numerical tests (issue 37, docs/design.md).

A float sum over n terms, in any order, is within gamma(n)·Σ|x| of the exact sum, gamma(n) = n·u/(1 − n·u)
(Higham, Accuracy and Stability, §3.1; a fused multiply-add only tightens it); a dot product over n terms is within
gamma(n)·Σ|x_i·y_i|. Two computations in two orders are within twice that of each other.
"""

from __future__ import annotations

import numpy as np

from tests.numerics import assert_close

U32 = 2.0**-24  # float32 unit roundoff
U64 = 2.0**-53  # float64
UBF16 = 2.0**-8  # bfloat16


def gamma(n: float, u: float = U32) -> float:
    """n·u/(1 − n·u): the relative bound of n rounded operations in a row."""
    return n * u / (1 - n * u)


def assert_within(got, want, bound, *, label: str) -> float:
    """|got − want| <= bound elementwise, `bound` an array of derived per-element bounds (broadcast): assert_close of
    the error in units of the bound (atol 1), so the matrix logs the worst fraction of the bound reached."""
    g, w = (np.asarray(x.detach().cpu().double() if hasattr(x, "detach") else x, dtype=np.float64) for x in (got, want))
    b = np.asarray(bound.detach().cpu().double() if hasattr(bound, "detach") else bound, dtype=np.float64)
    same = (g == w) | (np.isnan(g) & np.isnan(w))
    with np.errstate(divide="ignore", invalid="ignore"):
        err = np.where(same, 0.0, np.abs(g - w) / b)
    err = np.where(np.isnan(err), np.inf, err)
    return assert_close(err, np.zeros_like(err), atol=1.0, label=label, kind="bound")
