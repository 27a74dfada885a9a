"""The `cpu` preset reproduces the 1-layer phenomena (spec extreme-tokens §11, R4-R8).

Short runs of the real preset (600 of its 2,000 steps: the phenomena are established by step 400), the same runs
as `attnlab reproduce --profile quick` (docs/reproduction.md). The spec's thresholds are used where they hold at
this scale; R5's "smallest of the first 10 positions" is checked against the mean of the other positions (no
per-position value norms are saved), which the reproduction table states.
"""

import numpy as np
import pytest

import attnlab.bb as bb
from attnlab.bb.config import InterveneConfig, resolve_config

STEPS = 600


@pytest.fixture(scope="module")
def softmax_run(tmp_path_factory):
    cfg = resolve_config("cpu", attention="softmax", steps=STEPS, ckpt_every=STEPS)
    return bb.train(cfg, tmp_path_factory.mktemp("bb") / "softmax", progress=False)


@pytest.mark.slow
def test_softmax_sink_forms_with_backcopy_solved(softmax_run):
    m = softmax_run.tables["metrics"].to_dict("records")
    last = m[-1]
    assert m[0]["attn_sink"] < 0.2  # no sink at initialisation
    assert last["attn_sink"] >= 0.6 and last["excess_risk_backcopy"] < 0.05  # R4
    assert last["delta_logit"] > 0 > last["delta_logit_trigger"]  # R4: Δlogit signs
    peak = max(r["value_norm_bos"] for r in m)
    assert last["value_norm_bos"] <= 0.5 * peak  # R5: value drain
    assert last["value_norm_bos"] < 0.5 * last["value_norm_others"]
    sink = next(i for i, r in enumerate(m) if r["attn_sink"] >= 0.6)
    steps = np.log([r["step"] for r in m[sink:]])
    dl = np.array([r["delta_logit"] for r in m[sink:]])
    assert dl[-1] > dl[0]  # R6: the logit keeps growing after the sink forms ...
    fit = np.polyval(np.polyfit(steps, dl, 1), steps)
    r2 = 1 - ((dl - fit) ** 2).sum() / ((dl - dl.mean()) ** 2).sum()
    assert r2 >= 0.9  # ... about linearly in log t (measured R² 0.973 at 600 steps)


@pytest.mark.slow
def test_interventions_on_trained_softmax_model(softmax_run, tmp_path):
    table = bb.intervene(InterveneConfig(str(softmax_run.path)), tmp_path / "iv").tables["interventions"]
    rows = {r["intervention"]: r for r in table.to_dict("records")}
    full = rows["none (full model)"]
    head = rows["zero head 0.0"]
    assert head["risk_backcopy"] > 2.0  # R7
    assert abs(head["risk_bigram"] - full["risk_bigram"]) < 0.02  # R7 (measured 0.012 at step 600)
    assert rows["zero MLP 0"]["risk_bigram"] > 3.5  # R7 (measured 3.5625 at step 600: little margin)
    assert rows["zero MLP 0"]["risk_bigram"] > full["risk_bigram"] + 1.0  # 3.56 vs 2.19
    dormant = rows["attention 0.0 -> <s> (non-trigger queries)"]
    assert abs(dormant["risk_bigram"] - full["risk_bigram"]) < 0.05  # the head is dormant there
    assert rows["attention 0.0 -> <s> (all queries)"]["risk_backcopy"] > 2.0  # ... and active on triggers
