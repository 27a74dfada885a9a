"""benchmarks/compare_runs.py: exact by default, within a relative tolerance when asked."""

from __future__ import annotations

import json

import numpy as np

from tests.sweep.conftest import load_compare


def test_exact_and_relative_comparisons(tmp_path):
    cr = load_compare()
    assert cr.close({"a": [1.0, "x"]}, {"a": [1.0, "x"]}, 0.0)
    assert not cr.close({"a": 1.0}, {"a": 1.0 + 1e-12}, 0.0)
    assert cr.close({"a": 1.0}, {"a": 1.0 + 1e-12}, 1e-9) and not cr.close({"a": 1.0}, {"a": 1.01}, 1e-3)
    assert cr.close("0.5", "0.50000001", 1e-6) and not cr.close("a", "b", 1e-6)
    assert cr.close(float("nan"), float("nan"), 1e-6)
    x = np.linspace(1, 2, 5)
    assert cr.close(x, x + 1e-9, 1e-6) and not cr.close(x, x + 1e-9, 0.0) and not cr.close(x, x[:4], 1e-6)
    for side, value in (("old", 1.0), ("new", 1.0 + 1e-8)):
        (tmp_path / side).mkdir()
        (tmp_path / side / "metrics.json").write_text(json.dumps({"loss": value}))
    assert cr.compare(tmp_path / "old", tmp_path / "new", {}) == ["differs: metrics.json"]
    assert cr.compare(tmp_path / "old", tmp_path / "new", {}, rtol=1e-6) == []
