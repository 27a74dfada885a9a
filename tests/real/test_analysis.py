"""Head classification thresholds and Sink_1^ε (spec extreme-tokens §10.4)."""

from __future__ import annotations

import numpy as np

from attnlab.scan.analysis import class_counts, classify_heads, pair_shift


def test_classes_follow_thresholds():
    prose = np.array([[0.6, 0.1, 0.6, 0.4, 0.1]])
    code = np.array([[0.7, 0.2, 0.1, 0.45, 0.5]])
    rows = classify_heads({"prose": prose, "code": code})
    assert [r["class"] for r in rows] == ["sink-all", "active-all", "active-dormant", "mixed", "active-dormant"]
    assert rows[2]["dormant_on"] == "prose" and rows[2]["active_on"] == "code"
    assert class_counts(rows) == {"sink-all": 1, "active-all": 1, "active-dormant": 2, "mixed": 1}
    shift = pair_shift({"prose": prose, "code": code}, "prose", "code")
    assert [(r["layer"], r["head"]) for r in shift] == [(0, 4)]
