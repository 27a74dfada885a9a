"""The `cpu` preset without softmax (spec extreme-tokens §11, R8): ReLU attention forms no sink. In a file of its own
so that `make test`'s two workers (`--dist loadfile`) run it beside the softmax phenomena of test_phenomena_slow.py
instead of after them (each is ~85 s of the suite on a 2-core machine)."""

import pytest

import attnlab.bb as bb
from attnlab.bb.config import resolve_config

STEPS = 600  # as test_phenomena_slow.py: 600 of the preset's 2,000 steps


@pytest.mark.slow
def test_relu_attention_has_no_sink(tmp_path):
    cfg = resolve_config("cpu", attention="relu", steps=STEPS, ckpt_every=STEPS)
    m = bb.train(cfg, tmp_path / "relu", progress=False).tables["metrics"].to_dict("records")
    assert max(r["attn_sink"] for r in m) < 0.05  # R8, every snapshot
    assert m[-1]["excess_risk_backcopy"] < 0.01  # R8 (measured 0.0023 at step 600)
    assert m[-1]["value_norm_bos"] > m[0]["value_norm_bos"]  # no value drain
