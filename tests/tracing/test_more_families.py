"""Every family traces or is refused in one line (issue 40, item 5), on tiny random models built offline.

- Families whose attention module computes its own attention (GPT-Neo, MPT, Falcon, BLOOM, XGLM) take the eager
  fallback: their statistics equal an independent float64 numpy computation from `output_attentions`, and the
  fallback's T² cost is checked, and refused in one line, before any forward.
- Multi-head latent attention (DeepSeek-V3: value heads of another size than query/key heads) in every stats mode.
- Hybrids (Jamba, Bamba, Qwen3-Next, LFM2, MiniMax) trace their attention layers and report the others as "none".
- Families the generic tests do not cover trace with eager's statistics; Mamba is refused before any forward.
- No keyword of ours reaches a module whose forward does not take it.

Every model runs in float64, so the reference weights are exact to ~1e-16; the trace reduces them in float32
(unit roundoff u = 2^-24 ≈ 6e-8), so a statistic (a mean of weights in [0, 1], or of entropies ≤ log T, over at most
B·T ≤ 24 rows, each row a sum of at most T = 12 terms) is within ~T·u·log T ≈ 2e-6 of the reference: 1e-5 holds
with margin. The fused path's weights exp(s·q·k − lse) are computed from float32 logits |s| ≤ 10 (asserted), whose
rounding moves a weight by at most ~2·|s|·u ≈ 1.2e-6 relative: inside the same 1e-5.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np
import pytest
import torch

import attnlab
from attnlab.errors import InputError
from attnlab.runs import budget
from attnlab.tracing.adapters.arch import get_arch
from attnlab.tracing.adapters.eager import eager_bytes
from attnlab.tracing.adapters.hf import new_recorder, traced
from attnlab.tracing.interventions import MoveToSink, ZeroHead, ZeroLayer
from tests.real.families import EAGER, FAMILIES, HYBRID, MORE, NO_ATTENTION, V, tiny_family

T, B = 12, 2
TRACED = [*EAGER, *HYBRID, *MORE, "deepseek-v3"]


def _ids(seed: int = 0) -> torch.Tensor:
    return torch.randint(3, V, (B, T), generator=torch.Generator().manual_seed(seed))


def _model(name: str) -> torch.nn.Module:
    """The tiny model in float64 (XGLM in float32: its own mask fill overflows float64), mixtures of experts through
    their eager loop (the grouped GEMM takes no float64)."""
    model = tiny_family(name)
    if name == "xglm":
        return model
    model.double()
    try:
        model.set_experts_implementation("eager")
    except (ValueError, AttributeError):  # no mixture of experts
        pass
    return model


def _reference_weights(model, ids) -> list[np.ndarray | None]:
    """Per layer, eager attention weights [B,H,T,T] float64 from `output_attentions` (None: a layer without
    attention), with the family's own eager attention."""
    arch = get_arch(model)
    previous = model.config._attn_implementation
    if arch.interface:
        model.set_attn_implementation("eager")
    else:  # Falcon under "sdpa" adds its boolean mask as 0/1 in its eager branch (`adapters.eager._EagerConfig`)
        model.config._attn_implementation = "eager"
    try:
        with torch.no_grad():
            att = model(input_ids=ids, output_attentions=True, use_cache=False).attentions
    finally:
        if arch.interface:
            model.set_attn_implementation(previous)
        else:
            model.config._attn_implementation = previous
    layers = arch.attention_set
    given = att if len(att) == arch.n_layers else [None] * arch.n_layers  # MiniMax: its linear layers' too
    if len(att) != arch.n_layers:  # Jamba: only its attention layers'
        assert len([a for a in att if a is not None]) == len(layers), (len(att), layers)
        for l, a in zip(layers, [a for a in att if a is not None], strict=True):
            given[l] = a
    return [given[l].double().numpy() if l in layers else None for l in range(arch.n_layers)]


@functools.cache
def _family(name: str) -> tuple[torch.nn.Module, torch.Tensor, list[np.ndarray | None], torch.Tensor]:
    """(float64 model, ids, its eager weights per layer, its own logits), built once per family for the three
    stats modes (a trace leaves the model as it was)."""
    model = _model(name)
    ids = _ids()
    with torch.no_grad():
        own = model(input_ids=ids, use_cache=False).logits
    return model, ids, _reference_weights(model, ids), own


def _stats(A: np.ndarray) -> dict[str, np.ndarray]:
    """The documented statistics (docs/api.md, spec extreme-tokens §5) of one layer's weights A [N,H,T,T], in numpy
    float64, independently of the recorder."""
    N, H, T_, _ = A.shape
    j = np.arange(T_)
    i = np.arange(1, T_)
    rows = A[:, :, 1:, :]
    p = rows / rows.sum(-1, keepdims=True)
    ent = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(-1) / np.log(i + 1.0)  # [N,H,T-1]
    return {
        "attn_key0_by_query": A[..., 0].mean(0),
        "attn_col_mean": A.sum(axis=(0, 2)) / ((T_ - j) * N),
        "row_entropy": ent.mean(axis=(0, 2)),
        "sink_score_per_sample": A[:, :, 1:, 0].mean(-1),
        "key0_col_mean_per_sample": A[..., 0].mean(-1),
    }


def _trace(model, ids, stats: str):
    rec = new_recorder(model, T, vocab_size=V)
    with traced(model, rec, stats=stats) as sess:
        logits = sess.forward(ids)
    return rec.result(), logits


def _forwards(model) -> list[int]:
    """A counter of the model's forwards (a pre-hook on its input embedding); remove with `.handle.remove()`."""
    count = [0]
    model.get_input_embeddings().register_forward_pre_hook(lambda m, a: count.__setitem__(0, count[0] + 1))
    return count


def _modes(name: str) -> list[str]:
    """The stats modes a family is tested in: all three where the path depends on them (multi-head latent attention,
    hybrids); the eager fallback takes one path whatever the mode; the other families the two fused ones (their
    chunked path is the generic tests' own)."""
    if name in EAGER:
        return ["fast"]
    return ["fast", "full", "chunked"] if name in HYBRID or name.startswith("deepseek") else ["fast", "full"]


@pytest.mark.parametrize("name, stats", [(n, s) for n in TRACED for s in _modes(n)])
def test_family_traces_with_eager_statistics(name, stats):
    """The trace's statistics equal numpy's from eager `output_attentions` to 1e-5 (module docstring), in every
    stats mode; the logits are the model's own; the path of each layer is reported."""
    model, ids, ref, own = _family(name)
    arch = get_arch(model)
    tr, logits = _trace(model, ids, stats)
    # the chunked function computes in float32 (u = 6e-8): logits of size ~1 within ~1e-6
    torch.testing.assert_close(logits, own, atol=1e-5, rtol=1e-5)
    for l in range(arch.n_layers):
        path = tr.attention_paths[l]
        if ref[l] is None:
            assert path == "none" and np.all(np.isnan(tr.attn_key0_by_query[l])), (name, l, path)
            continue
        assert path == "output_attentions" if not arch.interface else path not in ("", "none", "output_attentions")
        full_rows = stats != "fast" or not arch.interface
        for field, want in _stats(ref[l]).items():
            got = getattr(tr, field)[:, l] if field.endswith("per_sample") else getattr(tr, field)[l]
            if field == "row_entropy" and not full_rows:
                assert np.all(np.isnan(got))
                continue
            if field == "attn_col_mean" and not full_rows:
                got, want = got[..., 0], want[..., 0]
            np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"{name} layer {l}: {field} ({stats})")
    if arch.interface:
        assert np.nanmax(np.abs(tr.logit_key0)) <= 10.0  # the bound the module docstring's 1e-5 assumes
    else:  # the eager fallback has no q, k, v: those statistics are NaN, not 0
        assert np.all(np.isnan(tr.logit_key0)) and np.all(np.isnan(tr.value_norm))


@pytest.mark.parametrize("name", [*EAGER, "jamba", "deepseek-v3", "llama"])
def test_no_keyword_of_ours_reaches_a_module_that_does_not_take_it(name):
    """Inside a traced forward (recording, and with MoveToSink where the family allows it), every module is called
    only with keywords its forward names or takes through **kwargs; `attnlab_session` only reaches attention modules
    (GPT-Neo's MLP got it before, and raised TypeError)."""
    model = tiny_family(name)
    arch = get_arch(model)
    bad: list[str] = []
    got_session: list[torch.nn.Module] = []

    def check(mod, args, kwargs):
        params = inspect.signature(mod.forward).parameters
        if "attnlab_session" in kwargs:
            got_session.append(mod)
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            bad.extend(f"{type(mod).__name__}.{k}" for k in set(kwargs) - set(params))

    moves = [[], [MoveToSink(arch.attention_set[0], 0)]] if arch.interface else [[]]
    for ivs in moves:
        with traced(model, new_recorder(model, T) if not ivs else None, ivs) as sess:
            handles = [m.register_forward_pre_hook(check, with_kwargs=True) for m in model.modules()]
            try:
                sess.forward(_ids())
            finally:
                for h in handles:
                    h.remove()
    assert not bad, bad
    attention = {id(arch.attn[l]) for l in arch.attention_set}
    assert all(id(m) in attention for m in got_session)
    assert bool(got_session) == arch.interface


@pytest.mark.parametrize("name", list(EAGER))
def test_eager_fallback_streams_and_refuses_what_does_not_fit(name, monkeypatch):
    """The fallback drops each layer's weights once recorded (the model's list of attentions holds None), keeps the
    patterns asked for, and refuses in one line, before any forward, a batch whose T² tensors exceed the memory
    limit: EAGER_COPIES·B·H·T²·8 bytes in float64, exactly at the boundary."""
    model = _model(name)
    arch = get_arch(model)
    ids = _ids(1)
    seen: list = []
    model.register_forward_hook(lambda m, a, out: seen.append(out.attentions))
    rec = new_recorder(model, T, keep_patterns=[(1, 2)])
    with traced(model, rec) as sess:
        sess.forward(ids)
    assert seen and all(a is None for a in seen[0])
    want = _reference_weights(model, ids)[1]
    assert want is not None
    np.testing.assert_allclose(rec.result().patterns["1.2"], want[:, 2], atol=1e-6)  # float32 copies of weights ≤ 1
    dtype = next(model.parameters()).dtype
    need = eager_bytes(arch, B, T, dtype)
    assert need == 3 * B * arch.n_heads * T * T * (8 if dtype == torch.float64 else 4)
    count = _forwards(model)
    monkeypatch.setattr(budget, "memory_limit", lambda: need - 1)
    with pytest.raises(InputError) as err, traced(model, new_recorder(model, T)) as sess:
        sess.forward(ids)
    assert "\n" not in str(err.value) and "eager attention" in str(err.value) and count[0] == 0
    monkeypatch.setattr(budget, "memory_limit", lambda: need)
    with traced(model, new_recorder(model, T)) as sess:
        sess.forward(ids)
    assert count[0] == 1


@pytest.mark.parametrize(
    "name, build",
    [
        ("mamba", lambda m: attnlab.trace(m, _ids())),  # no attention at all
        ("gpt-neo", lambda m: traced(m, new_recorder(m, T), [MoveToSink(0, 1)])),  # not attnlab's attention
        ("jamba", lambda m: traced(m, new_recorder(m, T), [ZeroHead(0, 1)])),  # layer 0 is Mamba
        ("jamba", lambda m: traced(m, new_recorder(m, T), hooks={"blocks.2.attn.hook_z": lambda x, h: None})),
        ("jamba", lambda m: traced(m, new_recorder(m, T), hooks={"blocks.0.hook_attn_out": lambda x, h: None})),
        ("jamba", lambda m: traced(m, new_recorder(m, T, keep_patterns=[(2, 0)]))),  # no pattern in a Mamba layer
    ],
)
def test_refused_in_one_line_before_any_forward(name, build):
    """(`traced` directly: `attnlab.trace` may run a two-token probe of the block structure for its hook points.)"""
    model = tiny_family(name)
    count = _forwards(model)
    with pytest.raises(InputError) as err, build(model):
        pass
    assert "\n" not in str(err.value) and count[0] == 0, str(err.value)


def test_hybrid_lists_its_layers_and_zero_layer_on_a_mixer_is_the_identity():
    """Jamba: layers 1 and 3 are attention, 0 and 2 Mamba; ZeroLayer on a Mamba layer silences its mixer and MLP, so
    the block passes its input through unchanged."""
    model = tiny_family("jamba")
    arch = get_arch(model)
    assert arch.attention_set == [1, 3]
    assert attnlab.trace(model, _ids()).attention_paths[0::2] == ["none", "none"]
    seen = {}
    block = arch.blocks[2]
    block.register_forward_hook(lambda m, a, out: seen.update(x=a[0], y=out[0] if isinstance(out, tuple) else out))
    attnlab.trace(model, _ids(), interventions=[ZeroLayer(2)])
    torch.testing.assert_close(seen["y"], seen["x"], atol=0, rtol=0)


def test_every_family_of_the_generic_tests_is_not_repeated_here():
    assert not set(TRACED) - {"deepseek-v3"} & set(FAMILIES) and set(NO_ATTENTION) == {"mamba"}


@pytest.mark.parametrize("name", ["bloom", "mpt"])
def test_zero_layer_on_modules_that_add_the_residual_themselves(name):
    """BLOOM's attention and MLP and MPT's MLP add the residual inside their own forward: ZeroLayer there returns
    the residual they were given (not zeros, which would erase the stream), so the block is the identity."""
    model = tiny_family(name)
    arch = get_arch(model)
    seen = {}
    arch.blocks[1].register_forward_hook(
        lambda m, a, out: seen.update(x=a[0], y=out[0] if isinstance(out, tuple) else out)
    )
    attnlab.trace(model, _ids(), interventions=[ZeroLayer(1)])
    torch.testing.assert_close(seen["y"], seen["x"], atol=0, rtol=0)
