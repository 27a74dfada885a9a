"""The BB part of `make demo` runs end to end (with few steps) and writes its report."""

import pytest

import attnlab.bb.demo as bb_demo
from attnlab.reports.page import Report


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
    # values: the intervention run re-evaluates the softmax run's final model on the same evaluation batch, so its
    # "none" row must equal that run's last metrics; zeroing the head must change the risks
    import json

    from attnlab.runs import RunDir

    rows = {r["intervention"]: r for r in json.loads((tmp_path / "intervene" / "interventions.json").read_text())}
    last = RunDir(tmp_path / "softmax").metrics()[-1]
    for key in ("risk_backcopy", "risk_bigram", "attn_sink", "delta_logit"):
        assert rows["none (full model)"][key] == pytest.approx(last[key], rel=1e-9, abs=1e-12), key
    assert rows["none (full model)"]["step"] == last["step"] == 10
    assert rows["zero head 0.0"]["risk_backcopy"] != pytest.approx(last["risk_backcopy"], rel=1e-6)
    for name in ("softmax", "relu", "sgd"):
        metrics = RunDir(tmp_path / name).metrics()
        assert [r["step"] for r in metrics][-1] == 10 and metrics[-1]["loss"] < metrics[0]["loss"], name
    # every run wrote its own report; the demo's section renders none of them again (the demo links them)
    for name, title in (("compare_attention", "Softmax vs ReLU"), ("compare_optimizer", "Adam vs SGD")):
        assert title in (tmp_path / name / "report.html").read_text()
    assert (tmp_path / "theory" / "report.html").is_file() and (tmp_path / "intervene" / "report.html").is_file()
    assert "data:image/png;base64" not in rep.html() and "Final metrics" in rep.html()
