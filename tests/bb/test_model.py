"""The toy transformer: attention forms (spec extreme-tokens §3), hook points, shape errors."""

import math

import pytest
import torch

from attnlab.errors import AttnlabError
from attnlab.toy.model import ToyConfig, ToyTransformer


def _capture(model, tokens, names):
    got = {}
    hooks = {n: (lambda key: lambda x, name: got.__setitem__(key, x.detach().clone()))(n) for n in names}
    with model.hooks(hooks):
        logits = model(tokens)
    return got, logits


def test_relu_attention_form():
    torch.manual_seed(0)
    m = ToyTransformer(ToyConfig(vocab=10, d_model=16, n_heads=2, d_mlp=32, max_len=12, attn="relu"))
    tokens = torch.randint(0, 10, (3, 12))
    got, _ = _capture(m, tokens, ["blocks.0.attn.hook_attn_scores", "blocks.0.attn.hook_pattern"])
    s, A = got["blocks.0.attn.hook_attn_scores"], got["blocks.0.attn.hook_pattern"]
    T = 12
    i = torch.arange(T).view(T, 1)
    j = torch.arange(T).view(1, T)
    expect = torch.where(j <= i, torch.relu(s) / (i + 1), torch.zeros(()))
    torch.testing.assert_close(A, expect)
    assert (A.sum(-1) <= 1 + 1e-6).all()
    # the scores are q·k/√d_h from the fused projection
    x = m.blocks[0].ln1(m.embed(tokens) + m.pos.weight[:T])
    q, k, _ = m.blocks[0].attn.qkv(x).view(3, T, 3, 2, 8).unbind(2)
    torch.testing.assert_close(s, torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(8))


def test_softmax_rows_sum_to_one_and_are_causal():
    torch.manual_seed(1)
    m = ToyTransformer(ToyConfig(vocab=10, d_model=16, n_heads=4, d_mlp=32, max_len=8))
    got, _ = _capture(m, torch.randint(0, 10, (2, 8)), ["blocks.0.attn.hook_pattern"])
    A = got["blocks.0.attn.hook_pattern"]
    torch.testing.assert_close(A.sum(-1), torch.ones(2, 4, 8))
    assert (A.triu(1) == 0).all()


def test_hook_can_replace_a_tensor_and_layer_options():
    torch.manual_seed(2)
    cfg = ToyConfig(vocab=10, d_model=16, n_layers=3, d_mlp=32, max_len=8, no_attn=[2], no_mlp=[1], linear_mlp=[0])
    m = ToyTransformer(cfg)
    assert m.blocks[2].attn is None and m.blocks[1].mlp is None and m.blocks[0].mlp.linear
    tokens = torch.randint(0, 10, (2, 8))
    with m.hooks(
        {
            "blocks.1.hook_attn_out": lambda x, n: torch.zeros_like(x),
            "blocks.0.hook_mlp_out": lambda x, n: torch.zeros_like(x),
        }
    ):
        got = {}
        with m.hooks(
            {
                "blocks.1.hook_resid_post": lambda x, n: got.setdefault("post", x),
                "blocks.0.hook_resid_mid": lambda x, n: got.setdefault("mid0", x),
            }
        ):
            m(tokens)
    # block 1 has no MLP and its attention was zeroed: resid_post of block 1 = resid_post of block 0 = resid_mid 0
    torch.testing.assert_close(got["post"], got["mid0"])


def test_bad_configs_and_inputs():
    with pytest.raises(AttnlabError, match="not divisible"):
        ToyTransformer(ToyConfig(d_model=10, n_heads=3))
    with pytest.raises(AttnlabError, match="out of range"):
        ToyTransformer(ToyConfig(n_layers=2, no_attn=[2]))
    m = ToyTransformer(ToyConfig(vocab=10, d_model=8, d_mlp=8, max_len=4))
    with pytest.raises(AttnlabError, match="sequence length 5 exceeds the model's 4 positions"):
        m(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(AttnlabError, match="unknown hook point"):
        with m.hooks({"blocks.9.attn.hook_z": lambda x, n: x}):
            pass
