"""Tolerance assertions that the numerics matrix can measure (issue 37).

A numerical test compares through `assert_close(got, want, atol=..., rtol=..., label=..., kind=...)`:
- it asserts |got - want| <= atol + rtol·|want| elementwise (NaN only where both are NaN), as
  `numpy.testing.assert_allclose` does;
- it returns the worst ratio |got - want| / (atol + rtol·|want|) over the elements (1.0 is the bound itself);
- where `ATTNLAB_NUMERICS_LOG` names a file (set by `make test-numerics`), it appends one JSON line with the test,
  the label, the kind, the tolerance and the worst error and ratio reached.

`kind` says where the tolerance comes from, as docs/design.md's testing section requires:
- "bound": a bound derived in a comment beside the call (a float32 sum over n terms: n·2^-24·Σ|x|, ...);
  the matrix checks that every setting stays within it (ratio <= 1).
- "observed": a measured worst case times a margin; the matrix checks that every setting stays at least
  `MARGIN` times inside it (ratio <= 1 / MARGIN), so a tolerance set from what one CPU reached fails there first.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

MARGIN = 10.0
KINDS = ("bound", "observed")


def _as_array(x) -> np.ndarray:
    """A float64 numpy array from a tensor, array, list or scalar (tensors are detached and moved to the cpu)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def worst_ratio(got, want, atol: float, rtol: float) -> tuple[float, float]:
    """(largest |got - want|, largest |got - want| / (atol + rtol·|want|)) over the elements; inf where NaNs differ."""
    g, w = np.broadcast_arrays(_as_array(got), _as_array(want))
    both_nan = np.isnan(g) & np.isnan(w)
    same_inf = np.isinf(g) & (g == w)
    with np.errstate(invalid="ignore"):  # inf − inf is NaN here; the matching infinities are set to 0 just below
        err = np.where(both_nan | same_inf, 0.0, np.abs(g - w))
    err = np.where(np.isnan(err), np.inf, err)
    allowed = atol + rtol * np.abs(np.where(np.isfinite(w), w, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(err == 0, 0.0, err / allowed)
    if err.size == 0:
        return 0.0, 0.0
    return float(err.max()), float(ratio.max())


def _record(label: str, kind: str, atol: float, rtol: float, err: float, ratio: float) -> None:
    """Append one observation to the matrix's log (a no-op outside `make test-numerics`)."""
    path = os.environ.get("ATTNLAB_NUMERICS_LOG")
    if not path:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
    line = {"test": test, "label": label, "kind": kind, "atol": atol, "rtol": rtol, "err": err, "ratio": ratio}
    with Path(path).open("a") as f:  # one short line per append: whole lines even with two writers
        f.write(json.dumps(line) + "\n")


def assert_close(got, want, *, atol: float = 0.0, rtol: float = 0.0, label: str, kind: str) -> float:
    """Assert `got` equals `want` within atol + rtol·|want| elementwise, record the worst ratio, return it."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    err, ratio = worst_ratio(got, want, atol, rtol)
    _record(label, kind, atol, rtol, err, ratio)
    why = f"max |got - want| = {err:.3g}, {ratio:.3g}x the {kind} tolerance (atol {atol:g}, rtol {rtol:g})"
    assert ratio <= 1.0, f"{label}: {why}"
    return ratio
