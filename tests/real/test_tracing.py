"""Streamed statistics equal those from full eager attention weights (spec extreme-tokens §5, §10.2; R15)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.errors import AttnlabError, InputError
from attnlab.tracing.adapters.arch import get_arch
from attnlab.tracing.adapters.hf import forward_logits, new_recorder, traced
from attnlab.tracing.interventions import MoveToSink, ZeroDims, ZeroHead, ZeroLayer, ZeroMLP
from attnlab.tracing.recorder import TraceRecorder
from tests.numerics import assert_close
from tests.real.conftest import tiny_gpt2, tiny_llama
from tests.real.rounding import U32

T = 12
MODELS = {
    "llama-gqa": lambda: tiny_llama(n_heads=4, n_kv=2),
    "llama-mha": lambda: tiny_llama(n_heads=2, n_kv=2, seed=1),
    "llama-mqa": lambda: tiny_llama(n_heads=4, n_kv=1, seed=2),
    "gpt2": lambda: tiny_gpt2(n_heads=2),
}


def _ids(batch: int = 3, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 64, (batch, T), generator=torch.Generator().manual_seed(seed))


def _eager(model, ids):
    model.set_attn_implementation("eager")
    with torch.no_grad():
        out = model(input_ids=ids, output_attentions=True, output_hidden_states=True, use_cache=False)
    model.set_attn_implementation("sdpa")
    return out


def _value_states(model, ids) -> list[torch.Tensor]:
    """Per layer v [B,T,H_kv,d_h], read from the value projection by a hook (independent of the tracer)."""
    arch = get_arch(model)
    got, handles = [], []
    for a in arch.attn:
        if hasattr(a, "v_proj"):
            handles.append(a.v_proj.register_forward_hook(lambda m, i, o: got.append(o)))
        else:
            handles.append(a.c_attn.register_forward_hook(lambda m, i, o: got.append(o.split(arch.d_model, -1)[2])))
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)
    for h in handles:
        h.remove()
    return [v.reshape(*v.shape[:2], arch.n_kv_heads, arch.head_dim) for v in got]


# Two float32 forwards of the same model (the traced sdpa/chunked path, eager attention): no derived bound, so each
# tolerance is an observed worst case with its margin (numerics matrix on llama-gqa at chunk 40; default and AVX2
# kernels at 1 thread on every parameter); the margins are at least 30x.
@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize(
    "chunk", [1 << 22, pytest.param(40, marks=pytest.mark.numerics)]
)  # fmt: skip
def test_streamed_trace_equals_full_eager_weights(name, chunk):
    model = MODELS[name]()
    arch = get_arch(model)
    ids = _ids()
    keep = [(1, 1)]
    rec = new_recorder(model, T, keep_patterns=keep, vocab_size=64)
    with traced(model, rec, chunk_elements=chunk, stats="chunked") as session:
        logits = session.forward(ids)
    tr = rec.result()
    ref = _eager(model, ids)
    assert_close(logits, ref.logits, atol=1e-5, rtol=1e-5, label="logits", kind="observed")  # observed 1.2e-7
    # Reference: the shared recorder fed with the full output_attentions patterns.
    base = TraceRecorder(arch.n_layers, arch.n_heads, T, vocab_size=64, keep_patterns=keep)
    base.begin_batch(ids)
    for l, A in enumerate(ref.attentions):
        base.attention(l, A)
    want = base.result()
    for f in (
        "attn_col_mean",
        "attn_key0_by_query",
        "attn_key0_by_token",
        "row_entropy",
        "sink_score_per_sample",
        "key0_col_mean_per_sample",
    ):
        assert_close(getattr(tr, f), getattr(want, f), atol=1e-5, label=f, kind="observed")  # observed <= 3.2e-8
    assert_close(tr.patterns["1.1"], want.patterns["1.1"], atol=1e-5, label="pattern", kind="observed")  # 3e-8
    # Δlogit_i = s_i0 − mean_{1≤j≤i−1} s_ij = −mean_j (log A_ij − log A_i0): an independent check from weights.
    for l, A in enumerate(ref.attentions):
        logA = A.double().clamp_min(1e-300).log()
        d = torch.full(A.shape[:3], float("nan"), dtype=torch.float64)
        for i in range(2, T):
            d[:, :, i] = -(logA[:, :, i, 1:i] - logA[:, :, i, :1]).mean(-1)
        assert_close(tr.dlogit_by_query[l][:, 2:], d.mean(0)[:, 2:], atol=1e-4, rtol=1e-5, label="dlogit",
                     kind="observed")  # fmt: skip  # observed 5.3e-8
    # Residual stream: embedding output and inputs of later blocks equal output_hidden_states.
    for r in range(arch.n_layers):
        want_norm = ref.hidden_states[r].double().norm(dim=-1).mean(0).numpy()
        assert_close(tr.resid_norm[r], want_norm, rtol=1e-5, label="resid norm", kind="observed")  # 1.7e-9
    # Value norms ‖W_O^h v_{g(h),i}‖ from an einsum over the output projection's weights.
    vs = _value_states(model, ids)
    g = arch.n_heads // arch.n_kv_heads
    for l, v in enumerate(vs):
        W = arch.w_o_heads(l)  # [H,d,d_h]
        vrep = v.repeat_interleave(g, dim=2)  # [B,T,H,d_h]
        norms = torch.einsum("hdk,bthk->bthd", W, vrep).norm(dim=-1).mean(0).T  # [H,T]
        assert_close(tr.value_norm[l], norms, rtol=1e-5, atol=1e-6, label="value norm", kind="observed")  # 6.8e-9


@pytest.mark.parametrize("name", ["llama-gqa", "gpt2"])
def test_zeroed_head_changes_exactly_its_contribution(name):
    model = MODELS[name]()
    arch = get_arch(model)
    ids = _ids(2, seed=3)
    layer, head = 1, 1
    D = arch.head_dim

    def run(iv):
        seen = {}
        hooks = [
            arch.out_proj[layer].register_forward_hook(
                lambda m, i, o: seen.update(z=i[0].detach().clone(), y=o.detach().clone())
            )
        ]
        hooks.append(arch.blocks[0].register_forward_hook(lambda m, i, o: seen.update(b0=o.detach().clone())))
        with traced(model, None, iv or ()), torch.no_grad():
            model(input_ids=ids, use_cache=False)
        for h in hooks:
            h.remove()
        return seen

    clean = run(None)
    abl = run([ZeroHead(layer, head)])
    assert torch.equal(clean["b0"], abl["b0"])  # earlier layers untouched
    sl = slice(head * D, (head + 1) * D)
    assert torch.all(abl["z"][..., sl] == 0)
    other = torch.ones(arch.n_heads * D, dtype=torch.bool)
    other[sl] = False
    assert torch.equal(abl["z"][..., other], clean["z"][..., other])  # other heads' z unchanged
    contribution = clean["z"][..., sl] @ arch.w_o(layer)[:, sl].T  # W_O^h z^h
    # Observed 4.7e-9 (default and AVX2, 1 thread: 200x inside): an output projection with and without one head's
    # columns, against that head's product alone.
    torch.testing.assert_close(clean["y"] - abl["y"], contribution, atol=1e-5, rtol=1e-5)


def test_move_to_sink_and_zero_mlp_and_dims():
    model = MODELS["llama-gqa"]()
    arch = get_arch(model)
    ids = _ids(2, seed=4)
    rec = new_recorder(model, T)
    iv = [MoveToSink(0, 2), ZeroMLP(1), ZeroDims(0, (3, 5), (0,))]
    seen = {}
    with traced(model, rec, iv) as session:
        h1 = arch.mlp[1].register_forward_hook(lambda m, i, o: seen.update(mlp=o.clone()))
        h2 = arch.blocks[0].register_forward_hook(lambda m, i, o: seen.update(b0=o.clone()))
        session.forward(ids)
        h1.remove()
        h2.remove()
    tr = rec.result()
    assert np.allclose(tr.sink_score()[0, 2], 1.0) and tr.sink_score()[0, 1] < 0.99  # one-hot rows: exactly 1
    assert torch.all(seen["mlp"] == 0)
    assert torch.all(seen["b0"][:, 0, [3, 5]] == 0) and torch.any(seen["b0"][:, 1, [3, 5]] != 0)


def test_bad_inputs():
    model = MODELS["llama-gqa"]()
    with pytest.raises(InputError, match=r"head 7 is out of range; the model has heads 0..3"):
        with traced(model, None, [ZeroHead(1, 7)]):
            pass
    with pytest.raises(InputError, match="MLP layer 5 is out of range"):
        forward_logits(model, _ids(), interventions=[ZeroMLP(5)])
    with pytest.raises(InputError, match="residual dimension 32 is out of range 0..31"):
        forward_logits(model, _ids(), interventions=[ZeroDims(0, (32,))])
    with pytest.raises(InputError, match="longer than the model's context"):
        new_recorder(model, 65)

    class Odd(torch.nn.Module):
        class config:  # noqa: N801
            model_type = "bloom"

    with pytest.raises(AttnlabError, match="unsupported architecture Odd"):
        get_arch(Odd())


@pytest.mark.numerics
def test_entropy_fast_path_with_peaked_rows():
    """Rows whose weight on key 0 and on the diagonal underflow take the row-maximum fallback; same trace."""
    g = torch.Generator().manual_seed(5)
    B, H, Tn = 2, 3, 16
    S = torch.randn(B, H, Tn, Tn, generator=g) * 60.0
    S[..., 0] -= 200.0
    S = S.masked_fill(torch.ones(Tn, Tn, dtype=torch.bool).triu(1), -1e30)
    A = torch.softmax(S, -1)
    fast, ref = TraceRecorder(1, H, Tn), TraceRecorder(1, H, Tn)
    fast.begin_batch(None, batch_size=B)
    ref.begin_batch(None, batch_size=B)
    for q0 in range(0, Tn, 5):
        fast.attention_rows(0, q0, A[:, :, q0 : q0 + 5], S[:, :, q0 : q0 + 5])
    ref.attention(0, A)
    # float32 rows with the row-maximum fallback against float64 whole patterns: observed 2.9e-7 at most over the
    # numerics matrix, against 1e-5 (kept).
    assert_close(fast.result().row_entropy, ref.result().row_entropy, atol=1e-5, label="peaked entropy",
                 kind="observed")  # fmt: skip


def test_value_factors_cached_across_blocks_until_the_weight_changes(monkeypatch):
    """`traced(factors=...)`: a second block on the same model reuses the factors (no recomputation); changing W_O
    in place recomputes them, and the value norms follow the new weight."""
    from attnlab.tracing.adapters import hf

    model, ids = MODELS["llama-gqa"](), _ids(2, seed=4)
    calls = []
    monkeypatch.setattr(hf, "value_factor", lambda w, n: calls.append(1) or _real_value_factor(w, n))
    cache: dict = {}

    def norms() -> np.ndarray:
        rec = new_recorder(model, T)
        with traced(model, rec, factors=cache) as sess:
            sess.forward(ids)
        return rec.result().value_norm

    first = norms()
    assert len(calls) == 2  # two layers
    np.testing.assert_array_equal(norms(), first)
    assert len(calls) == 2
    with torch.no_grad():
        get_arch(model).out_proj[1].weight.mul_(2.0)
    second = norms()
    assert len(calls) == 3  # layer 1 only
    # W_O doubled (exact in float): observed bit-identical doubled norms (default and AVX2, 1 thread), 1e-6 kept.
    np.testing.assert_allclose(second[1], 2.0 * first[1], rtol=1e-6)
    np.testing.assert_array_equal(second[0], first[0])


def _real_value_factor(w, n):
    from attnlab.tracing.adapters.hf_attention import value_factor

    return value_factor(w, n)


def test_session_is_bound_to_the_block_and_leaves_nothing_on_the_model():
    """The session (recorder, Gram cache, plan) lives on the yielded object; hooks and the attention
    implementation are gone after the block; nesting on one model is refused."""
    model = MODELS["llama-gqa"]()
    ids = _ids(2, seed=6)
    before = model.config._attn_implementation
    rec = new_recorder(model, T)
    with traced(model, rec, [ZeroHead(0, 1)]) as session:
        session.forward(ids)
        assert session.recorder is rec and {layer for layer, _ in session.factors} == {0, 1}
        assert session.plan.zero_heads == {0: (1,)}
        with pytest.raises(InputError, match="cannot be nested"):
            with traced(model, new_recorder(model, T)):
                pass
    assert model.config._attn_implementation == before
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    clean = forward_logits(model, ids)
    with torch.no_grad():
        own = model(input_ids=ids, use_cache=False).logits
    assert torch.equal(clean, own)  # no intervention left behind


def test_move_to_sink_on_selected_queries_only():
    model = MODELS["llama-gqa"]()
    ids = _ids(2, seed=7)
    rows = torch.zeros(2, T, dtype=torch.bool)
    rows[0, 5:] = True  # sample 0, queries 5.. only
    rec = new_recorder(model, T, keep_patterns=[(1, 3)])
    ref = new_recorder(model, T, keep_patterns=[(1, 3)])
    forward_logits(model, ids, ref)
    forward_logits(model, ids, rec, [MoveToSink(1, 3, rows, "late queries of sample 0")])
    got, want = rec.result().patterns["1.3"], ref.result().patterns["1.3"]  # [N,T,T]
    onehot = np.zeros(T, dtype=np.float32)
    onehot[0] = 1.0
    assert np.array_equal(got[0, 5:], np.broadcast_to(onehot, (T - 5, T)))
    np.testing.assert_array_equal(got[0, :5], want[0, :5])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("name", ["llama-gqa", "gpt2"])
def test_zero_layer_makes_the_block_the_identity(name):
    model = MODELS[name]()
    arch = get_arch(model)
    seen = {}
    h = arch.blocks[1].register_forward_hook(
        lambda m, i, o: seen.update(x=i[0].clone(), y=(o[0] if isinstance(o, tuple) else o).clone())
    )
    forward_logits(model, _ids(2, seed=8), interventions=[ZeroLayer(1)])
    h.remove()
    torch.testing.assert_close(seen["y"], seen["x"], atol=0, rtol=0)


@pytest.mark.parametrize("kind", ["qwen2", "gpt_neox", "phi3"])
def test_blocks_found_from_the_module_tree(kind):
    """Architectures found by walking the module tree (no list of model types): the streamed sink score equals
    output_attentions, and zeroing a head still changes its layer's output."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(
        kind,
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=0,
        eos_token_id=0,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg).eval()
    arch = get_arch(model)
    assert (arch.n_layers, arch.n_heads, arch.kind) == (2, 4, "linear")
    ids = _ids(2, seed=9)
    rec = new_recorder(model, T)
    forward_logits(model, ids, rec)
    ref = _eager(model, ids)
    want = torch.stack([a[..., 1:, 0].mean(-1).mean(0) for a in ref.attentions]).numpy()
    # Observed 2.6e-8 (default and AVX2, 1 thread: 380x inside), as in test_streamed_trace_equals_full_eager_weights.
    np.testing.assert_allclose(rec.result().sink_score(), want, atol=1e-5)
    assert not torch.equal(forward_logits(model, ids, interventions=[ZeroHead(1, 2)]), forward_logits(model, ids))


def test_attention_outside_the_interface_takes_the_eager_fallback():
    """BLOOM's attention is its own code (ALiBi), outside AttentionInterface: it is no longer refused but traced
    from `output_attentions` (issue 40 item 5); its layers record the `output_attentions` path."""
    from transformers import BloomConfig, BloomForCausalLM

    import attnlab
    from attnlab.tracing.adapters.hf import check_traceable

    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = BloomForCausalLM(BloomConfig(vocab_size=64, hidden_size=32, n_layer=2, n_head=4)).eval()
    assert get_arch(model).max_positions is None
    check_traceable(model)
    tr = attnlab.trace(model, torch.randint(3, 64, (1, 8), generator=torch.Generator().manual_seed(0)))
    assert list(tr.attention_paths) == ["output_attentions"] * 2


@pytest.mark.numerics
def test_next_token_nll_in_row_chunks_equals_the_full_log_softmax():
    from attnlab.tracing.adapters.hf import next_token_nll

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 70, 300, generator=g) * 5
    ids = torch.randint(0, 300, (3, 70), generator=g)
    logp = torch.log_softmax(logits[:, :-1].double(), dim=-1)
    expected = -logp.gather(-1, ids[:, 1:, None]).squeeze(-1).mean(-1)
    for rows in (1, 7, 69, 256):
        # float32 log-softmax over V = 300 logits (|x| ~ 15) and a mean over 69 rows, against float64: the worst-case
        # bound (V + 69)·2^-24·max|x| is ~3e-4 of the value, so observed: 3.8e-7 (2.5e-2 of rtol 1e-6) at most over
        # the numerics matrix, kept.
        assert_close(next_token_nll(logits, ids, rows=rows), expected, rtol=1e-6, label="nll by rows",
                     kind="observed")  # fmt: skip


@pytest.mark.parametrize("method", ["radix", "select", "select-in-place"])  # both selections `faster_method` picks
@pytest.mark.parametrize(
    "case",
    ["scaled", "ties", "constant", "small", "outliers", "inf-nan", "negative", "float64", "one-bucket", "boundary"],
)
def test_lower_median_is_the_exact_order_statistic(case, method):
    from attnlab.tracing.recorder import lower_median

    rng = np.random.default_rng(3)
    if case == "scaled":  # per-coordinate scales, as in a residual stream
        x = np.abs(rng.standard_normal((3, 200, 96)) * rng.uniform(0.01, 5, 96)).astype(np.float32).reshape(-1)
    elif case == "ties":
        x = np.repeat(np.arange(7, dtype=np.float32), 9001)
    elif case == "constant":
        x = np.zeros(50_000, dtype=np.float32)
    elif case == "small":
        x = rng.random(101).astype(np.float32)
    elif case == "inf-nan":  # inf and NaN sort last, as numpy sorts them
        x = np.abs(rng.standard_normal(30_001)).astype(np.float32)
        x[:9000:3], x[1:12000:3] = np.inf, np.nan
    elif case == "negative":  # not |x|: the radix step must not be taken (negative bit patterns sort backwards)
        x = rng.standard_normal(40_000).astype(np.float32)
        x[:50] = -0.0
    elif case == "float64":
        x = np.abs(rng.standard_normal(20_000))
    elif case == "one-bucket":  # every entry in the median's bucket, and the median bucket the first and last
        x = (1.0 + rng.random(70_001) * 2**-8).astype(np.float32)
    elif case == "boundary":  # a bucket ends exactly at element (n−1)//2 − 1: the median is the next bucket's first
        x = rng.permutation(np.repeat(np.array([1.0, 4.0], dtype=np.float32), [5000, 5001]))
    else:
        x = np.abs(rng.standard_normal(60_001)).astype(np.float32)
        x[::997] = 1e4
    expected = np.sort(x)[(x.size - 1) // 2]
    kept = x.copy()
    got = lower_median(x, in_place=method.endswith("in-place"), method=method.split("-")[0])
    assert got == float(expected) or (np.isnan(got) and np.isnan(expected))
    assert method.endswith("in-place") or np.array_equal(x, kept, equal_nan=True)  # else the input is left as it was


@pytest.mark.parametrize("case", ["massive", "tied-maximum", "quiet", "bfloat16"])
@pytest.mark.parametrize("fused", [False, pytest.param(True, marks=pytest.mark.numerics)])
def test_device_stream_stats_equal_the_host_path(case, fused, monkeypatch):
    """The accelerator's residual statistics (`device_stream_stats`, run here on cpu tensors: the same torch ops)
    against the host path's (numpy selection, scratch buffer; or numba's fused pass, `fused`): the same median,
    first maximum and massive entries, exactly, and the same token norms (exactly on the numpy path)."""
    from attnlab.tracing.recorder import MASSIVE_ABS, MASSIVE_REL
    from attnlab.tracing.selection import device_stream_stats

    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 300, 48, generator=g) * torch.rand(48, generator=g) * 3
    if case in ("massive", "bfloat16"):
        x[0, 0, 7], x[1, 0, 7], x[1, 40, 3] = 4000.0, -2500.0, 3000.0
        x[0, 5, 1] = 150.0  # over MASSIVE_ABS, under MASSIVE_REL × the median: a candidate, not massive
    elif case == "tied-maximum":  # the first of two equal maxima, as np.argmax takes it
        x[0, 9, 4], x[1, 2, 0] = -5000.0, 5000.0
    if case == "bfloat16":
        x = x.bfloat16().float()
    from attnlab.tracing.fast import cpu_kernels

    if not fused:  # the numpy path: torch's float32 norms, as on the device
        monkeypatch.setattr(cpu_kernels, "AVAILABLE", False)
    elif not cpu_kernels.AVAILABLE:
        pytest.skip("numba is not installed")
    host = TraceRecorder(1, 2, 300)._host_stream_stats(x)
    dev = device_stream_stats(x, MASSIVE_ABS, MASSIVE_REL)
    if fused:  # float64 sums against torch's float32 ones: within the float32 bound d·2⁻²⁴ (d = 48: 2.9e-6)
        assert_close(dev.norm_sum, host.norm_sum, rtol=48 * U32, label="device norm sum", kind="bound")
    else:
        assert torch.equal(dev.norm_sum, host.norm_sum)
    assert (dev.flat, dev.max_abs, dev.median) == (host.flat, host.max_abs, host.median)
    assert np.array_equal(dev.idx, host.idx) and np.array_equal(dev.values, host.values)
    massive = {"massive": [7, 300 * 48 + 7, 300 * 48 + 40 * 48 + 3], "tied-maximum": [9 * 48 + 4, 300 * 48 + 2 * 48]}
    assert dev.idx.tolist() == massive.get(case.replace("bfloat16", "massive"), [])
    assert dev.flat == {"tied-maximum": 9 * 48 + 4}.get(case, dev.flat)


def test_faster_method_times_copies_and_names_a_selection():
    from attnlab.tracing.selection import faster_method

    x = np.abs(np.random.default_rng(4).standard_normal(30_000)).astype(np.float32)
    kept = x.copy()
    assert faster_method(x) in ("select", "radix")
    assert np.array_equal(x, kept)  # timed on copies: the caller's stream keeps its order


@pytest.mark.parametrize("case", ["massive", "tied-maximum", "quiet", "bfloat16", "over-the-cap"])
def test_packed_stream_vector_equals_the_device_stats(case):
    """Issue 41 item 2: a stream packed where it lives (`device_stream_tensors`) and read back later
    (`stream_from_vector`) gives `device_stream_stats`' numbers exactly (run here on cpu tensors: the same torch
    ops), and the recorder keeps the same massive entries; over the cap (100 massive entries of distinct
    magnitudes, 64 kept) the kept ones are the largest, as the host merge keeps them."""
    from attnlab.tracing.recorder import MASSIVE_ABS, MASSIVE_REL, MAX_MASSIVE_ENTRIES
    from attnlab.tracing.selection import device_stream_stats, device_stream_tensors, stream_from_vector

    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 300, 48, generator=g) * torch.rand(48, generator=g) * 3
    if case in ("massive", "bfloat16"):
        x[0, 0, 7], x[1, 0, 7], x[1, 40, 3] = 4000.0, -2500.0, 3000.0
        x[0, 5, 1] = 150.0  # over MASSIVE_ABS, under MASSIVE_REL × the median: not massive
    elif case == "tied-maximum":
        x[0, 9, 4], x[1, 2, 0] = -5000.0, 5000.0
    elif case == "over-the-cap":
        x.view(-1)[torch.randperm(x.numel(), generator=g)[:100]] = 3000.0 + torch.arange(100.0) * 7
    if case == "bfloat16":
        x = x.bfloat16().float()
    want = device_stream_stats(x, MASSIVE_ABS, MASSIVE_REL)
    got = stream_from_vector(device_stream_tensors(x, MAX_MASSIVE_ENTRIES).cpu(), 300, MASSIVE_ABS, MASSIVE_REL)
    assert torch.equal(got.norm_sum, want.norm_sum)
    assert (got.flat, got.max_abs, got.median) == (want.flat, want.max_abs, want.median)
    if case != "over-the-cap":
        assert np.array_equal(got.idx, want.idx) and np.array_equal(got.values, want.values)
    else:  # the 64 largest of the 100, in index order
        top = np.sort(np.argsort(-np.abs(want.values), kind="stable")[:MAX_MASSIVE_ENTRIES])
        assert np.array_equal(got.idx, want.idx[top]) and np.array_equal(got.values, want.values[top])


def test_deferred_streams_give_the_same_trace_as_immediate_ones(monkeypatch):
    """A recorder that reads its residual statistics back once per batch (`defer_streams`, the accelerator's way)
    records the same Trace as one that reduces each stream at once: two batches of a tiny Llama, massive entries
    forced into its streams by a large embedding row. The immediate one takes the numpy path (torch's float32
    token norms, as the device's; numba's fused pass sums them in float64, so it differs in the last bits)."""
    from attnlab.tracing.fast import cpu_kernels

    monkeypatch.setattr(cpu_kernels, "AVAILABLE", False)
    model = tiny_llama(layers=3)
    with torch.no_grad():
        model.model.embed_tokens.weight[5, 3] = 5000.0
    traces = []
    for defer in (False, True):
        rec = new_recorder(model, 16, vocab_size=64)
        rec.defer_streams = defer
        for seed in (1, 2):
            ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(seed))
            ids[:, 4] = 5
            forward_logits(model, ids, rec)
        traces.append(rec.result())
    a, b = traces
    for name in ("resid_norm", "max_abs", "max_pos", "max_dim", "median_abs", "attn_key0_by_query", "attn_col_mean"):
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name
    assert a.massive.equals(b.massive) and len(a.massive) > 0
