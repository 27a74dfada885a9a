"""`attnlab.trace(..., grad=True)` (issue 40, item 3): the statistics (`tr.grad_stats`), cached activations and
logits are differentiable. Checked against central finite differences on tiny float64 models, and against a
TransformerLens-style attribution computed by a hand-written PyTorch forward (its own attention function, registered
with transformers, and a hook on the output projection): two independent methods."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnlab
from tests.real.families import V, tiny_family

T = 10
# Central differences (f(θ+h) − f(θ−h)) / 2h differ from f'(θ) by h²·f'''(ξ)/6 (truncation, O(h²)) plus about
# 2ε|f|/h (float64 rounding, ε = 2^-53). With h = 1e-5, |f'''| ≲ 10 and |f| ≲ 10 on these tiny models that is
# ≲ 2e-10 + 2e-10: tolerance 1e-9 (observed 1.3e-11 on both models, 2026-12-06).
H_STEP = 1e-5
FD_ATOL = 1e-9


def _ids(batch: int = 2, seed: int = 0, vocab: int = V) -> torch.Tensor:
    return torch.randint(3, vocab, (batch, T), generator=torch.Generator().manual_seed(seed))


def _objective(tr: attnlab.tracing.format.Trace) -> torch.Tensor:
    """A scalar from every differentiable output: statistics, logits and a cached activation."""
    g = tr.grad_stats
    return (
        g["sink_score"][0, 1, 0]
        + g["row_entropy"][1, 1, 1]
        + g["attn_col_mean"][0, 1, 1, 2]
        + g["key0_col_mean"][1, 0, 1]
        + 0.1 * tr.logits[0, -1, 5]
        + 0.01 * tr.cache["blocks.0.hook_resid_post"][1, 3].sum()
    )


def _check_finite_differences(model, ids, params: list[tuple[torch.Tensor, tuple[int, ...]]]) -> None:
    def value() -> torch.Tensor:
        return _objective(attnlab.trace(model, ids, grad=True, logits=True, cache="blocks.0.hook_resid_post"))

    f = value()
    grads = torch.autograd.grad(f, [p for p, _ in params])
    for (p, idx), g in zip(params, grads, strict=True):
        old = p.data[idx].item()
        with torch.no_grad():
            p.data[idx] = old + H_STEP
            up = value().item()
            p.data[idx] = old - H_STEP
            down = value().item()
            p.data[idx] = old
        fd = (up - down) / (2 * H_STEP)
        assert abs(g[idx].item() - fd) <= FD_ATOL, (idx, g[idx].item(), fd)
    assert any(abs(g[idx].item()) > 1e-4 for (_, idx), g in zip(params, grads, strict=True))  # not all trivially 0


def test_gradients_match_central_differences_on_a_transformers_model():
    """GPT-2: its LayerNorms, GELU and learned positions run in float64 throughout (Llama-style RMSNorms compute in
    float32 whatever the model's dtype, which would put ~1e-8 of noise into f and 1e-3 into the differences)."""
    model = tiny_family("gpt2").double()
    h = model.transformer.h
    params = [
        (h[0].attn.c_attn.weight, (0, 0)),  # a query weight of layer 0 (Conv1D: [d_model, 3·d_model])
        (h[0].attn.c_attn.weight, (3, 37)),  # a key weight
        (h[0].attn.c_attn.weight, (2, 70)),  # a value weight
        (h[1].attn.c_attn.weight, (9, 4)),
        (h[0].mlp.c_fc.weight, (7, 7)),
        (model.transformer.wte.weight, (int(_ids()[0, 0]), 3)),
    ]
    _check_finite_differences(model, _ids(), params)


def test_gradients_match_central_differences_on_the_toy_model():
    from attnlab.toy.model import ToyConfig, ToyTransformer

    with torch.random.fork_rng():
        torch.manual_seed(0)
        toy = ToyTransformer(ToyConfig(vocab=16, d_model=16, n_heads=2, n_layers=2, max_len=T)).double()
    attn0, attn1 = toy.blocks[0].attn, toy.blocks[1].attn
    params = [
        (attn0.qkv.weight, (0, 0)),
        (attn0.qkv.weight, (20, 3)),
        (attn1.qkv.weight, (5, 9)),
        (toy.pos.weight, (0, 2)),
    ]
    _check_finite_differences(toy, _ids(vocab=16), params)


def _hand_sink_gradient(model, ids, head: int) -> torch.Tensor:
    """d(sink score of head (1, head) of sequence 0)/d(layer 0's z), z [B,T,H·d_h] the input of its o_proj, by a
    plain PyTorch forward: the family's modules with a hand-written float64 causal attention (registered with
    transformers as "hand64", recording each layer's pattern) and a forward pre-hook keeping o_proj's input."""
    from transformers import AttentionInterface

    patterns: dict[int, torch.Tensor] = {}

    def hand64(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        g = query.shape[1] // key.shape[1]
        k, v = key.repeat_interleave(g, 1), value.repeat_interleave(g, 1)
        s = query @ k.transpose(-1, -2) * scaling
        n = s.shape[-1]
        A = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
        patterns[module.layer_idx] = A
        return (A @ v).transpose(1, 2).contiguous(), A

    AttentionInterface.register("hand64", hand64)
    z: list[torch.Tensor] = []
    o_proj = model.model.layers[0].self_attn.o_proj
    handle = o_proj.register_forward_pre_hook(lambda mod, args: z.append(args[0]))
    previous = model.config._attn_implementation
    model.set_attn_implementation("hand64")
    try:
        model(input_ids=ids, use_cache=False)
    finally:
        model.set_attn_implementation(previous)
        handle.remove()
    sink = patterns[1][0, head, 1:, 0].mean()  # (1/(T−1)) Σ_{i≥1} A_i0
    return torch.autograd.grad(sink, z[0])[0]


@pytest.mark.parametrize("head", [0, 3])
def test_sink_attribution_to_hook_z_equals_a_hand_written_forward(head):
    """TransformerLens-style attribution: the gradient of head (1, h)'s sink score with respect to layer 0's
    attn.hook_z, through trace(grad=True) (cache the point, differentiate `grad_stats`) and through the hand-written
    forward above. Float64 both: within 1e-10 (|grad| ~ 2e-3, ~1e3 float64 operations of relative error 2^-53 each:
    ≲ 1e-13; observed 0: the two run the same products in the same order). The same layer's z comes after its
    pattern: zero gradient."""
    model = tiny_family("llama").double()
    ids = _ids()
    tr = attnlab.trace(model, ids, grad=True, cache="blocks.0.attn.hook_z")
    z = tr.cache["blocks.0.attn.hook_z"]  # [B, T, H, d_head]
    (got,) = torch.autograd.grad(tr.grad_stats["sink_score"][0, 1, head], z, retain_graph=True)
    want = _hand_sink_gradient(model, ids, head).view_as(got)
    assert float(want.abs().max()) > 1e-4  # a real dependence, not 0 = 0
    torch.testing.assert_close(got, want, atol=1e-10, rtol=0)
    (same,) = torch.autograd.grad(tr.grad_stats["sink_score"][0, 0, head], z, allow_unused=True)
    assert same is None or not same.any()


def test_default_keeps_the_no_grad_fused_trace():
    """grad=False (the default): numpy logits, nothing with a graph, the fused kernel's paths, no grad_stats; and its
    statistics equal grad=True's within the recorder's float32 reductions (2^-24 relative on weights ≤ 1: 1e-6)."""
    model = tiny_family("llama")
    ids = _ids()
    tr = attnlab.trace(model, ids, logits=True, cache="blocks.0.hook_resid_post")
    assert isinstance(tr.logits, np.ndarray) and not tr.grad_stats
    assert not tr.cache["blocks.0.hook_resid_post"].requires_grad
    assert all(p != "eager" for p in tr.attention_paths)
    g = attnlab.trace(model, ids, grad=True, logits=True)
    assert g.logits.requires_grad and g.attention_paths == ["eager"] * 2
    np.testing.assert_allclose(g.grad_stats["sink_score"].detach().numpy(), tr.sink_score_per_sample, atol=1e-6)
    np.testing.assert_allclose(g.logits.detach().numpy(), tr.logits, atol=1e-5)


def test_a_graph_that_cannot_fit_is_refused_before_any_forward(monkeypatch):
    """grad=True keeps about GRAD_COPIES [H,T,T] tensors per layer and sequence: at T = 4096 on 2 layers of 4 heads,
    4 sequences, float32, 6·4·2·4·4096²·4 B = 12 GiB, over a 4 GiB limit (half an 8 GiB machine): one line, and the
    model never sees the inputs."""
    from attnlab.errors import InputError
    from attnlab.runs import budget

    model = tiny_family("llama")
    monkeypatch.setattr(budget, "memory_limit", lambda: 4 * 2**30)
    ran = []
    handle = model.register_forward_pre_hook(lambda m, a, kw: ran.append(kw["input_ids"].shape[1]), with_kwargs=True)
    try:
        with pytest.raises(InputError, match="grad=True for 4 sequences of 4096 tokens") as err:
            attnlab.trace(model, torch.full((4, 4096), 3), grad=True)
    finally:
        handle.remove()
    assert "\n" not in str(err.value) and not ran
