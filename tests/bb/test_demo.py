"""The BB part of `make demo` runs end to end (with few steps) and writes its report."""

import pytest

import attnlab.bb.demo as bb_demo
from attnlab.report import Report


@pytest.mark.slow
def test_bb_demo_end_to_end(tmp_path, monkeypatch):
    monkeypatch.setattr(bb_demo, "DEMO_STEPS", 10)
    rep = bb_demo.run_demo(tmp_path, seed=0)
    assert isinstance(rep, Report)
    for name in ("softmax", "relu", "sgd"):
        assert (tmp_path / name / "report.html").exists()
        assert (tmp_path / name / "figures" / "dynamics.png").exists()
    assert (tmp_path / "intervene" / "interventions.json").exists()
    assert not (tmp_path / "softmax" / "interventions.json").exists()
    assert (tmp_path / "sample" / "sequences.npy").exists()
    html = rep.html()
    assert "Softmax vs ReLU" in html and "Adam vs SGD" in html and "data:image/png;base64" in html
