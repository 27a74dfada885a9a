"""BB metric definitions on hand-built tensors with known answers (spec extreme-tokens §6)."""

import numpy as np
import pytest
import torch

from attnlab.bb.metrics import bb_metrics, risks
from attnlab.toy.model import ToyConfig, ToyTransformer
from attnlab.toy.task import build_bb_task
from attnlab.tracing import TraceRecorder
from attnlab.tracing.adapters.toy import trace_toy
from tests.numerics import assert_close


@pytest.fixture(scope="module")
def task():
    return build_bb_task()


def _hand_trace(task, seqs, sink_non_trigger=0.8, sink_trigger=0.1):
    """One layer, one head: every non-trigger query puts `sink_non_trigger` on key 0, triggers `sink_trigger`;
    the rest is spread uniformly over keys 1..i. Scores: s_i0 = 5, others 1 (Δlogit = 4), for triggers s_i0 = −2."""
    x = torch.as_tensor(seqs[:, :-1])
    B, T = x.shape
    trig = task.trigger_mask(x)
    a0 = torch.where(
        trig, torch.tensor(sink_trigger, dtype=torch.float64), torch.tensor(sink_non_trigger, dtype=torch.float64)
    )
    A = torch.zeros(B, 1, T, T, dtype=torch.float64)
    for i in range(T):
        if i == 0:
            A[:, 0, 0, 0] = 1.0
            continue
        A[:, 0, i, 0] = a0[:, i]
        A[:, 0, i, 1 : i + 1] = ((1 - a0[:, i]) / i).unsqueeze(-1)
    S = torch.ones(B, 1, T, T, dtype=torch.float64)
    S[:, 0, :, 0] = torch.where(trig, torch.tensor(-2.0), torch.tensor(5.0)).double()
    rec = TraceRecorder(1, 1, T, vocab_size=task.V)
    rec.begin_batch(x)
    rec.attention(0, A, S)
    norms = torch.full((B, T, 1), 3.0)
    norms[:, 0] = 0.5
    rec.value_norms(0, norms)
    rec.residual(0, torch.ones(B, T, 4))
    h = torch.ones(B, T, 4)
    h[:, 0] = 10.0
    rec.residual(1, h)
    return rec.result()


def test_metrics_on_hand_built_trace(task):
    seqs = task.sample(32, 24, seed=0)
    tr = _hand_trace(task, seqs)
    logits = torch.zeros(32, 24, task.V)
    m = bb_metrics(tr, logits, seqs, task)
    x = seqs[:, :-1]
    trig = task.is_trigger[x]
    n_non = (~trig).sum()
    # position 0 (A_00 = 1) is a non-trigger query and is included
    expect = (0.8 * (n_non - 32) + 1.0 * 32) / n_non
    # means of at most 32·24 = 768 equal float64 values: within n·u = 8.5e-14 of the value (0 reached by hand)
    assert m["attn_sink_with0"] == pytest.approx(expect, abs=1e-12)
    assert m["attn_sink"] == pytest.approx(0.8, abs=1e-12)
    assert m["delta_logit"] == pytest.approx(4.0, abs=1e-12)
    assert m["delta_logit_trigger"] == pytest.approx(-3.0, abs=1e-12)
    assert m["value_norm_bos"] == pytest.approx(0.5) and m["value_norm_others"] == pytest.approx(3.0)
    assert m["resid_norm_bos"] == pytest.approx(20.0) and m["resid_norm_others"] == pytest.approx(2.0)
    # uniform logits: risk = log V in both classes
    assert m["risk_backcopy"] == pytest.approx(np.log(task.V)) and m["risk_bigram"] == pytest.approx(np.log(task.V))


@pytest.mark.numerics
def test_oracle_logits_have_zero_excess_risk(task):
    seqs = task.sample(16, 32, seed=1)
    o = torch.as_tensor(task.oracle(seqs))
    r = risks(torch.log(o.clamp_min(1e-30)), seqs, task)
    # risk and oracle entropy: the same log-probabilities averaged in two ways (matrix worst 6.9e-17, 1.4e+07x inside)
    assert_close(r["excess_risk_bigram"], 0.0, atol=1e-9, label="oracle excess risk bigram", kind="observed")
    assert_close(r["excess_risk_backcopy"], 0.0, atol=1e-9, label="oracle excess risk backcopy", kind="observed")
    assert r["risk_bigram"] == pytest.approx(r["oracle_entropy_bigram"])


@pytest.mark.numerics
def test_toy_trace_value_norms_and_bos_rows_identical(task):
    torch.manual_seed(0)
    m = ToyTransformer(ToyConfig(vocab=task.V, d_model=16, n_heads=2, d_mlp=32, max_len=16))
    tokens = torch.as_tensor(task.sample(8, 16, seed=3)[:, :-1])
    got = {}
    with m.hooks({"blocks.0.attn.hook_v": lambda x, n: got.setdefault("v", x.detach().clone())}):
        tr, logits = trace_toy(m, tokens)
    W = m.blocks[0].attn.o.weight.detach()  # [D, H*d]
    v = got["v"]  # [B,T,H,d]
    for h in range(2):
        out = v[:, :, h] @ W[:, h * 8 : (h + 1) * 8].T  # [B,T,D]
        # float32: the head's output by hand against the trace's (matrix worst 1.2e-07, 85x inside)
        assert_close(tr.value_norm[0, h], out.norm(dim=-1).mean(0).numpy(), rtol=1e-5, label=f"value norm head {h}",
                     kind="observed")  # fmt: skip
    # position 0 always holds <s> and sees only itself: its statistics are identical across the batch
    x0 = []
    with m.hooks({"blocks.0.hook_resid_post": lambda x, n: x0.append(x[:, 0].detach().clone())}):
        m(tokens)
    # the same row in another batch position (matrix worst 0)
    assert_close(x0[0], x0[0][:1].expand_as(x0[0]), atol=1e-6, label="BOS rows across the batch", kind="observed")
