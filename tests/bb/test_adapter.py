"""The toy trace adapter compiles the shared intervention values into hooks (spec extreme-tokens §7)."""

import pytest
import torch

from attnlab.errors import InputError
from attnlab.toy.model import ToyConfig, ToyTransformer
from attnlab.tracing.adapters.toy import toy_hooks, toy_shape, trace_toy
from attnlab.tracing.interventions import MoveToSink, ZeroDims, ZeroHead, ZeroLayer, ZeroMLP


@pytest.fixture(scope="module")
def model():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return ToyTransformer(
            ToyConfig(vocab=12, d_model=16, n_layers=2, n_heads=2, d_mlp=32, max_len=8, no_mlp=[1])
        ).eval()


TOKENS = torch.randint(0, 12, (3, 8), generator=torch.Generator().manual_seed(1))


def _capture(model, interventions, points):
    got = {}
    grab = {p: (lambda key: lambda x, name: got.__setitem__(key, x.detach().clone()))(p) for p in points}
    with torch.no_grad(), model.hooks(toy_hooks(model, interventions)), model.hooks(grab):
        logits = model(TOKENS)
    return got, logits


def test_shape_of_the_toy_model(model):
    shape = toy_shape(model)
    assert (shape.n_layers, shape.n_heads, shape.d_model) == (2, 2, 16)
    assert shape.attn_layers == (0, 1) and shape.mlp_layers == (0,)


def test_each_intervention_does_what_it_says(model):
    got, _ = _capture(model, [ZeroHead(0, 1)], ["blocks.0.attn.hook_z"])
    assert (got["blocks.0.attn.hook_z"][:, :, 1] == 0).all() and (got["blocks.0.attn.hook_z"][:, :, 0] != 0).any()
    got, _ = _capture(model, [ZeroMLP(0)], ["blocks.0.hook_resid_mid", "blocks.0.hook_resid_post"])
    torch.testing.assert_close(got["blocks.0.hook_resid_post"], got["blocks.0.hook_resid_mid"], rtol=0, atol=0)
    got, _ = _capture(model, [ZeroLayer(1)], ["blocks.1.hook_resid_pre", "blocks.1.hook_resid_post"])
    torch.testing.assert_close(got["blocks.1.hook_resid_post"], got["blocks.1.hook_resid_pre"], rtol=0, atol=0)
    got, _ = _capture(model, [ZeroDims(0, dims=(3, 5), positions=(0,))], ["blocks.1.hook_resid_pre"])
    x = got["blocks.1.hook_resid_pre"]
    assert (x[:, 0, [3, 5]] == 0).all() and (x[:, 1:, 3] != 0).all()
    rows = torch.zeros(3, 8, dtype=torch.bool)
    rows[:, 4:] = True
    got, _ = _capture(model, [MoveToSink(1, 0, queries=rows, label="late")], ["blocks.1.attn.hook_pattern"])
    A = got["blocks.1.attn.hook_pattern"]
    assert (A[:, 0, 4:, 0] == 1).all() and (A[:, 0, 4:, 1:] == 0).all() and (A[:, 0, 1:4, 0] < 1).all()
    assert (A[:, 1, 4:, 0] < 1).all()  # the other head is untouched


def test_trace_sees_the_intervened_model(model):
    full, logits = trace_toy(model, TOKENS, chunk=3)
    cut, cut_logits = trace_toy(model, TOKENS, interventions=[ZeroLayer(0), ZeroLayer(1)], chunk=3)
    x = model.embed(TOKENS) + model.pos.weight[:8]
    torch.testing.assert_close(cut_logits, model.unembed(model.ln_f(x)).detach())
    assert not torch.allclose(cut_logits, logits)
    assert cut.resid_norm[2] == pytest.approx(cut.resid_norm[0])  # nothing was added by either block
    assert not any(point.fns for point in model.hook_modules().values())  # nothing is left on the model


@pytest.mark.parametrize(
    "iv, message",
    [
        (ZeroHead(0, 5), "head 5 is out of range; the model has heads 0..1"),
        (ZeroHead(2, 0), "layer 2 is out of range"),
        (ZeroMLP(1), "layer 1 has no MLP"),
        (ZeroDims(0, dims=(16,)), "residual dimension 16 is out of range 0..15"),
        (MoveToSink(0, -1), "head -1 is out of range"),
    ],
)
def test_bad_indices_are_one_line(model, iv, message):
    with pytest.raises(InputError, match=message.replace(".", r"\.")) as info:
        toy_hooks(model, [iv])
    assert "\n" not in str(info.value)
