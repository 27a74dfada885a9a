"""TransformerLens's hook points on every traced family (issue 40, item 1): hook_embed, hook_resid_mid,
attn.hook_q/k/v, attn.hook_attn_scores, attn.hook_pattern and ln_final.hook_normalized, on tiny random models run in
float64, against the family's own eager attention (its `eager_attention_forward`, patched to record what it
receives and returns)."""

from __future__ import annotations

import sys

import pytest
import torch

import attnlab
from attnlab.errors import InputError
from attnlab.runs import budget
from attnlab.tracing.adapters.arch import get_arch
from attnlab.tracing.adapters.hf import traced
from tests.real.families import FAMILIES, V, tiny_family

T = 12
NAMES = list(FAMILIES)
PARALLEL = {"phi", "gpt-neox", "cohere", "cohere2"}  # attention and MLP read the block's input: no resid_mid
# Eager's softmax runs in float32 and is cast back (transformers' eager_attention_forward), so its weights carry
# float32 rounding: |ΔA| ≤ a few units of 2^-24 ≈ 6e-8 per weight (observed ≤ 1e-7 on every family), and later
# layers inherit it through their inputs. 1e-5 is the bound, 100x above that.
EAGER_ATOL = 1e-5
EXACT = 1e-12  # float64 against float64 through the same operations (a few units of 2^-53 ≈ 1.1e-16 per step)


def _model(name: str) -> torch.nn.Module:
    model = tiny_family(name).double()
    if getattr(model.config, "_experts_implementation", None) not in (None, "eager"):
        model.set_experts_implementation("eager")  # grouped GEMMs take no float64
    return model


def _ids(batch: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, V, (batch, T), generator=torch.Generator().manual_seed(seed))


def _eager(model, ids, monkeypatch):
    """Eager forward with output_attentions, and per layer (query, key, value) as the family's eager attention
    function receives them ([B,H,T,d], [B,H_kv,T,d], [B,H_kv,T,d_v]) with its `scaling`."""
    mod = sys.modules[type(get_arch(model).attn[0]).__module__]
    seen: list[tuple[torch.Tensor, ...]] = []
    original = mod.eager_attention_forward

    def recording(module, query, key, value, *args, **kwargs):
        seen.append((query.detach().clone(), key.detach().clone(), value.detach().clone()))
        return original(module, query, key, value, *args, **kwargs)

    monkeypatch.setattr(mod, "eager_attention_forward", recording)
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(input_ids=ids, output_attentions=True, use_cache=False)
    finally:
        model.set_attn_implementation(previous)
        monkeypatch.undo()
    return out, seen


CACHED = ("attn.hook_pattern", "attn.hook_attn_scores", "attn.hook_q", "attn.hook_k", "attn.hook_v", "resid_mid",
          "resid_post", "mlp_out", "hook_embed", "ln_final.hook_normalized")  # fmt: skip


@pytest.fixture(scope="module", params=NAMES)
def family(request):
    """(name, float64 model, its trace of `_ids()` caching the points above, with logits): one trace a family."""
    model = _model(request.param)
    return request.param, model, attnlab.trace(model, _ids(), cache=lambda p: p.endswith(CACHED), logits=True)


def test_pattern_scores_and_qkv_equal_the_family_eager_attention(family, monkeypatch):
    """hook_pattern = eager output_attentions (1e-5), hook_q/k/v = what the eager function receives (layer 0 bit
    for bit up to float64 rounding; later layers within eager's float32 softmax), and softmax(hook_attn_scores) =
    hook_pattern with −inf exactly where eager gives weight 0 to a hidden key."""
    name, model, tr = family
    arch = get_arch(model)
    want = CACHED[:5]
    ref, seen = _eager(model, _ids(), monkeypatch)
    assert len(seen) == arch.n_layers == len(ref.attentions)
    for l, (A, (q, k, v)) in enumerate(zip(ref.attentions, seen, strict=True)):
        got = {p: tr.cache[f"blocks.{l}.{p}"] for p in want}
        torch.testing.assert_close(got["attn.hook_pattern"], A, atol=EAGER_ATOL, rtol=0, msg=f"{name} layer {l}")
        tol = EXACT if l == 0 else EAGER_ATOL
        for point, x in (("attn.hook_q", q), ("attn.hook_k", k), ("attn.hook_v", v)):
            assert got[point].shape == x.transpose(1, 2).shape  # [B, pos, heads (H or H_kv), d_head]
            torch.testing.assert_close(got[point], x.transpose(1, 2), atol=tol, rtol=0, msg=f"{name} {l} {point}")
        s = got["attn.hook_attn_scores"]
        assert s.shape == A.shape  # [batch, head, query, key]
        assert torch.equal(torch.isneginf(s), A == 0) or name == "gpt-oss"  # hidden keys: −inf (gpt-oss: below)
        if name != "gpt-oss":  # its learned sink logit takes a share of every row: A = softmax([s, sink])[:-1]
            torch.testing.assert_close(torch.softmax(s, -1), got["attn.hook_pattern"], atol=EXACT, rtol=0)
    assert tr.cache["blocks.0.attn.hook_k"].shape[2] == arch.n_kv_heads  # GQA not expanded


def _mlp_added(name: str, model, l: int, mlp_out: torch.Tensor) -> torch.Tensor:
    """What block l adds to the residual stream from its MLP's output, as the family writes it."""
    block = get_arch(model).blocks[l]
    if hasattr(block, "post_feedforward_layernorm"):  # Gemma 2/3, OLMo 2: the MLP's output is normalised first
        return block.post_feedforward_layernorm(mlp_out)
    return mlp_out * getattr(model.config, "residual_multiplier", 1.0)  # Granite scales both branches


def test_resid_mid_embed_and_final_norm(family):
    """resid_mid + (the MLP's contribution) = resid_post exactly; hook_embed is the embedding module's output;
    ln_final.hook_normalized is the final norm's output and the head reads it; parallel blocks refuse resid_mid."""
    name, model, tr = family
    arch = get_arch(model)
    ids = _ids()
    points = attnlab.hook_points(model)
    assert points[0] == "hook_embed" and points[-1] == "ln_final.hook_normalized"
    mid = [p for p in points if p.endswith("hook_resid_mid")]
    if name in PARALLEL:
        assert not mid
        with pytest.raises(InputError, match="parallel blocks") as err:
            with traced(model, hooks={"blocks.0.hook_resid_mid": lambda x, h: None}):
                pass
        assert "\n" not in str(err.value)
    else:
        assert len(mid) == arch.n_layers
    with torch.no_grad():
        emb = model.get_input_embeddings()(ids)
        torch.testing.assert_close(tr.cache["hook_embed"], emb, atol=0, rtol=0)
        final = tr.cache["ln_final.hook_normalized"]
        assert final.shape == (2, T, arch.d_model)
        head = model.get_output_embeddings()(final)
        if not getattr(model.config, "final_logit_softcapping", None) and not hasattr(model.config, "logits_scaling"):
            logit_scale = getattr(model, "logit_scale", 1.0)  # Cohere scales its logits
            torch.testing.assert_close(torch.as_tensor(tr.logits).double(), (head * logit_scale).float().double(),
                                       atol=1e-6, rtol=1e-6)  # fmt: skip  # float32 logits of float64 values
        for l in range(arch.n_layers if name not in PARALLEL else 0):
            post, m = tr.cache[f"blocks.{l}.hook_resid_post"], tr.cache[f"blocks.{l}.hook_mlp_out"]
            m = m.view(post.shape)  # OPT's fc2 sees the stream flattened to [B·T, D]
            added = _mlp_added(name, model, l, m)
            torch.testing.assert_close(tr.cache[f"blocks.{l}.hook_resid_mid"] + added, post, atol=EXACT, rtol=0)


def test_pattern_edit_changes_the_forward_as_computed_by_hand(family):
    """All mass on key 0 in every head of the last layer: its z_i = v_{g(h),0} for every query (hand computation),
    and the logits equal those of `MoveToSink` on every head, which the exact chunked path applies (a second,
    independent implementation). Only the hooked layer leaves its path: the others take the fused kernel (soft-capped
    Gemma 2's, the exact chunked function, as without hooks)."""
    name, model, untouched = family
    arch = get_arch(model)
    last = arch.n_layers - 1
    ids = _ids()

    def onto_key0(A, hook):
        B = torch.zeros_like(A)
        B[..., 0] = 1.0
        return B

    zs: dict[str, torch.Tensor] = {}
    hooks = [
        (f"blocks.{last}.attn.hook_pattern", onto_key0),
        (f"blocks.{last}.attn.hook_z", lambda z, h: zs.setdefault("z", z.clone())),
    ]
    tr = attnlab.trace(model, ids, hooks=hooks, logits=True,
                       cache=[f"blocks.{last}.attn.hook_v", f"blocks.{last}.attn.hook_pattern"])  # fmt: skip
    assert torch.equal(tr.cache[f"blocks.{last}.attn.hook_pattern"][..., 0], torch.ones(2, arch.n_heads, T).double())
    paths = tr.attention_paths
    assert paths[last] == "eager" and all((p == "eager") == (name == "gemma2") for p in paths[:last]), paths
    moved = [attnlab.MoveToSink(last, h) for h in range(arch.n_heads)]
    by_iv = attnlab.trace(model, ids, interventions=moved, logits=True)
    # float32 logits of the same float64 forward: the chunked path computes the same z = v_0 exactly (weights 1·v)
    torch.testing.assert_close(torch.as_tensor(tr.logits), torch.as_tensor(by_iv.logits), atol=1e-6, rtol=0)
    assert float(abs(tr.logits - untouched.logits).max()) > 1e-4  # the edit did change the output
    v = tr.cache[f"blocks.{last}.attn.hook_v"]  # [B, T, H_kv, d_v]
    v0 = v[:, :1].repeat_interleave(arch.n_heads // v.shape[2], dim=2)  # head h reads KV head h ÷ (H/H_kv)
    torch.testing.assert_close(zs["z"], v0.expand_as(zs["z"]), atol=0, rtol=0)


def test_query_edit_changes_the_pattern():
    """hook_q returning zeros: every score is 0, so each row of a causal Llama layer is uniform over its i+1 keys."""
    model = _model("llama")
    tr = attnlab.trace(model, _ids(), hooks={"blocks.1.attn.hook_q": lambda q, h: torch.zeros_like(q)},
                       cache="blocks.1.attn.hook_pattern")  # fmt: skip
    i = torch.arange(T, dtype=torch.float64)
    want = torch.tril(torch.ones(T, T, dtype=torch.float64)) / (i + 1).unsqueeze(1)
    torch.testing.assert_close(tr.cache["blocks.1.attn.hook_pattern"], want.expand(2, 4, T, T), atol=EXACT, rtol=0)


def test_a_pattern_cache_that_cannot_fit_is_refused_before_any_forward(monkeypatch):
    """hook_pattern on every layer at T = 32768: [1, 4, T, T] float32 per layer, 2 layers = 32 GiB; refused in one
    line (here against a 16 GiB limit: half a 32 GiB machine) before the model sees the inputs (the only forward
    is hook_resid_mid's two-token discovery, `hooked.resid_mid_sites`)."""
    model = tiny_family("llama")
    monkeypatch.setattr(budget, "memory_limit", lambda: 16 * 2**30)
    ran = []
    handle = model.register_forward_pre_hook(lambda m, a, kw: ran.append(kw["input_ids"].shape[1]), with_kwargs=True)
    try:
        with pytest.raises(InputError, match="caching 2 hook points for 1 sequences of 32768 tokens") as err:
            attnlab.trace(model, torch.full((1, 32768), 3), cache=lambda p: p.endswith("hook_pattern"))
    finally:
        handle.remove()
    assert "\n" not in str(err.value) and set(ran) <= {2}


@pytest.mark.parametrize("name", ["lfm2", "minimax", "gptj", "persimmon", "gpt-neo"])
def test_every_listed_point_is_accepted_beyond_the_generic_families(name, monkeypatch):
    """Hybrids (LFM2's convolutions, MiniMax's linear attention), families outside FAMILIES and the eager fallback:
    a cache of every listed point traces (only attention layers list attention points), their patterns equal eager's
    (1e-5: as above), and an attention point the family cannot have is refused in one line."""
    from tests.real.families import tiny_family as any_family

    model = any_family(name)
    arch = get_arch(model)
    ids = _ids()
    points = attnlab.hook_points(model, linear_inputs=True)
    tr = attnlab.trace(model, ids, cache=lambda p: True)
    assert set(tr.cache) == set(points)
    pattern_layers = [l for l in range(arch.n_layers) if f"blocks.{l}.attn.hook_pattern" in points]
    assert pattern_layers == (arch.attention_set if arch.interface else [])
    if pattern_layers:
        ref, _ = _eager(model, ids, monkeypatch)
        attentions = [a for a in ref.attentions if a is not None]
        if len(attentions) == arch.n_layers:  # one entry a layer: keep the attention layers'
            attentions = [attentions[l] for l in pattern_layers]
        for l, A in zip(pattern_layers, attentions, strict=True):
            torch.testing.assert_close(tr.cache[f"blocks.{l}.attn.hook_pattern"], A, atol=EAGER_ATOL, rtol=0)
    missing = (
        next(l for l in range(arch.n_layers) if l not in pattern_layers)
        if len(pattern_layers) < arch.n_layers
        else None
    )
    if missing is not None:
        with pytest.raises(InputError) as err:
            attnlab.trace(model, ids, cache=f"blocks.{missing}.attn.hook_pattern")
        assert "\n" not in str(err.value)


def test_mean_ablate_refuses_a_pattern_point():
    """MeanAblate's positions, heads and dims index [batch, pos, ...]; a pattern is [batch, head, query, key]: refused
    in one line before any forward."""
    model = tiny_family("llama")
    iv = attnlab.MeanAblate("blocks.0.attn.hook_pattern", _ids())
    with pytest.raises(InputError, match="MeanAblate takes") as err:
        attnlab.trace(model, _ids(), interventions=[iv])
    assert "\n" not in str(err.value)
