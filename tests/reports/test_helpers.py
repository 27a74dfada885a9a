"""The report builder's helpers: safe script literals, rounded arrays, ids unique on a combined page."""

from __future__ import annotations

import json
import math

import numpy as np

from attnlab.reports.page import Report, element_id, fmt, js_json, rounded, with_slider


def test_js_json_cannot_close_the_script_element():
    text = js_json({"tok": "</script><script>alert(1)</script>", "c": "<!--"})
    assert "</" not in text and "<!--" not in text
    assert json.loads(text.replace("<\\!--", "<!--")) == {"tok": "</script><script>alert(1)</script>", "c": "<!--"}


def test_rounded_keeps_four_significant_digits():
    out = rounded(np.array([[1234567.0, 0.000123456, -2.71828], [0.0, np.nan, np.inf]]))
    assert out[0] == [1235000.0, 0.0001235, -2.718]
    assert out[1][0] == 0.0 and out[1][1] is None and out[1][2] is None
    assert fmt(0.000123456) == "1.235e-04" and fmt(3.14159) == "3.142" and fmt(np.float32(2.5)) == "2.5"
    assert math.isclose(rounded(1 / 3), 0.3333)


def test_element_ids_differ_between_runs_and_slider_frames(tmp_path):
    a, b = element_id(tmp_path / "bb" / "softmax", "curves"), element_id(tmp_path / "bb" / "relu", "curves")
    assert a == "bb-softmax-curves" and a != b
    fig = with_slider({"data": [{"type": "bar", "y": [1]}], "layout": {}}, [[{"y": [i]}] for i in range(3)],
                      ["0", "5", "10"], "step ", play=True)  # fmt: skip
    assert [f["name"] for f in fig["frames"]] == ["step 0", "step 5", "step 10"]
    assert len(fig["layout"]["sliders"][0]["steps"]) == 3 and fig["layout"]["sliders"][0]["active"] == 2
    page = Report("t").plotly(fig, "p").html("plotly.min.js")
    assert '"frames"' in page and 'src="plotly.min.js"' in page
