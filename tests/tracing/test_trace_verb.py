"""`attnlab.trace` (issue 19): one in-memory verb for toy and HF models, named hook points, MeanAblate.

Each property is checked against an independent computation: eager `output_attentions`, a hook registered here
with torch directly, or the hand-computed mean of a reference set."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnlab
from attnlab.errors import InputError
from tests.numerics import assert_close
from tests.real.families import FAMILIES, tiny_family
from tests.real.rounding import U32

T = 12


def _ids(n: int = 3, seed: int = 0, vocab: int = 64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n, T), generator=g)


def _eager_sink_scores(model, ids) -> np.ndarray:
    """[L,H] mean over sequences and queries 1..T-1 of A_i0, from eager output_attentions."""
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            att = model(input_ids=ids, output_attentions=True, use_cache=False).attentions
    finally:
        model.set_attn_implementation(previous)
    return np.stack([a[:, :, 1:, 0].mean((0, 2)).double().numpy() for a in att])


def _marked(names, marked=("gpt2", "llama")):
    """The parameters, two of them in the numerics matrix (the rest run in `make test` only: time)."""
    return [pytest.param(n, marks=pytest.mark.numerics) if n in marked else n for n in names]


@pytest.mark.parametrize("family", _marked(sorted(FAMILIES)))
def test_heads_sink_score_equals_eager_attention(family):
    model = tiny_family(family)
    ids = _ids()
    heads = attnlab.trace(model, ids).heads
    want = _eager_sink_scores(model, ids)
    assert list(heads.columns[:3]) == ["layer", "head", "sink_score"]
    got = heads.pivot(index="layer", columns="head", values="sink_score").to_numpy()
    # Two float32 forwards (the traced fused path, eager attention) through the whole model: no derived bound;
    # observed 3e-7 at most (numerics matrix on gpt2 and llama; default and AVX2 at 1 thread on every family),
    # against 1e-5 (kept).
    assert_close(got, want, atol=1e-5, label=f"sink score {family}", kind="observed")


def test_user_zero_head_hook_equals_ZeroHead():
    model = tiny_family("llama")
    ids = _ids()

    def zero_head_2(z, point):  # z [batch, pos, head, d_head]
        z = z.clone()
        z[:, :, 2] = 0.0
        return z

    by_hook = attnlab.trace(model, ids, hooks={"blocks.1.attn.hook_z": zero_head_2}, logits=True).logits
    by_value = attnlab.trace(model, ids, interventions=[attnlab.ZeroHead(1, 2)], logits=True).logits
    plain = attnlab.trace(model, ids, logits=True).logits
    assert np.array_equal(by_hook, by_value)
    assert np.abs(by_hook - plain).max() > 1e-4  # the head matters


def test_transformerlens_hook_code_runs_unchanged():
    """Issue 40: code written for TransformerLens — `fn(tensor, hook)` reading `hook.name` and `hook.layer()`, and a
    `fwd_hooks` list of (name_or_filter, fn) pairs — gives what the same edit by a ZeroHead value gives, and a
    filter reaches exactly the points whose names it accepts, in order; the dict form and `fn(x, point)` with a
    string comparison still work."""
    model, ids = tiny_family("llama"), _ids()
    seen: list[tuple[str, int]] = []

    def zero_head_2(z, hook):  # TransformerLens style
        assert hook.name == "blocks.1.attn.hook_z" and hook.layer() == 1
        z = z.clone()
        z[:, :, 2] = 0.0
        return z

    def record(resid, hook):
        seen.append((hook.name, hook.layer()))

    fwd_hooks = [("blocks.1.attn.hook_z", zero_head_2), (lambda name: name.endswith("hook_resid_post"), record)]
    by_list = attnlab.trace(model, ids, hooks=fwd_hooks, logits=True, batch_size=len(ids)).logits
    by_value = attnlab.trace(model, ids, interventions=[attnlab.ZeroHead(1, 2)], logits=True).logits
    assert np.array_equal(by_list, by_value)
    assert seen == [("blocks.0.hook_resid_post", 0), ("blocks.1.hook_resid_post", 1)]
    old_style = attnlab.trace(model, ids, logits=True, hooks={
        "blocks.1.attn.hook_z": lambda z, point: zero_head_2(z, point) if point == "blocks.1.attn.hook_z" else None
    }).logits  # fmt: skip
    assert np.array_equal(old_style, by_value)
    with pytest.raises(InputError, match="unknown hook point 'blocks.9.hook_z'"):
        attnlab.trace(model, ids, hooks=[("blocks.9.hook_z", record)])
    with pytest.raises(InputError, match="list of \\(name_or_filter, fn\\) pairs"):
        attnlab.trace(model, ids, hooks=[("blocks.0.hook_resid_post",)])


@pytest.mark.parametrize("kind", ["llama", "toy"])
def test_cache_returns_exactly_what_was_asked_equal_to_a_reading_hook(kind, monkeypatch):
    """Issue 40: `cache=` names, a name or a filter give `.cache[point]` for those points only, equal (exactly: the
    same tensors) to what a hook that reads them sees, batches joined on the first axis; a cache that would not
    fit is refused in one line before any forward."""
    from attnlab.toy.model import ToyConfig, ToyTransformer

    if kind == "toy":
        torch.manual_seed(0)
        model = ToyTransformer(ToyConfig(vocab=64, d_model=16, n_layers=2, n_heads=2, d_mlp=32, max_len=T)).eval()
    else:
        model = tiny_family("llama")
    ids = _ids(n=5)
    seen: dict[str, list] = {"blocks.1.hook_resid_post": [], "blocks.0.attn.hook_z": []}

    def read(x, hook):
        seen[hook.name].append(x.clone())

    tr = attnlab.trace(model, ids, hooks=dict.fromkeys(seen, read), cache=list(seen), batch_size=2)
    assert set(tr.cache) == set(seen)
    for point, parts in seen.items():
        assert len(parts) == 3 and torch.equal(tr.cache[point], torch.cat(parts, 0))  # batches of 2, 2, 1
    assert tr.cache["blocks.0.attn.hook_z"].shape[:2] == (5, T) and not tr.cache["blocks.0.attn.hook_z"].requires_grad
    one = attnlab.trace(model, ids, cache="blocks.1.hook_resid_post").cache
    assert list(one) == ["blocks.1.hook_resid_post"]
    by_filter = attnlab.trace(model, ids, cache=lambda name: name.endswith("hook_resid_post")).cache
    assert sorted(by_filter) == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    assert torch.equal(by_filter["blocks.1.hook_resid_post"], tr.cache["blocks.1.hook_resid_post"])
    assert attnlab.trace(model, ids).cache == {}
    import attnlab.runs.budget as budget

    monkeypatch.setattr(budget, "memory_limit", lambda: 5 * T * 16 * 4)  # less than two [5, T, 16+] float32 tensors
    with pytest.raises(InputError, match="caching 2 hook points for 5 sequences of 12 tokens would need"):
        attnlab.trace(model, ids, cache=list(seen))


def test_hook_points_are_found_and_a_hook_sees_the_documented_shapes():
    model = tiny_family("gpt2")
    points = attnlab.hook_points(model)
    assert "blocks.1.attn.hook_z" in points and "blocks.0.hook_resid_pre" in points and len(points) == 2 + 2 * 11
    seen = {}
    hooks = {p: (lambda x, point: seen.__setitem__(point, tuple(x.shape))) for p in points}
    attnlab.trace(model, _ids(2), hooks=hooks)
    assert seen["blocks.1.attn.hook_z"] == (2, T, 4, 8)
    assert seen["blocks.0.hook_resid_pre"] == seen["blocks.1.hook_mlp_out"] == (2, T, 32)
    linear = [p for p in attnlab.hook_points(model, linear_inputs=True) if p.endswith(".hook_in")]
    assert "blocks.0.attn.c_proj.hook_in" in linear
    attnlab.trace(model, _ids(1), hooks={linear[0]: lambda x, point: seen.__setitem__(point, tuple(x.shape))})
    assert seen[linear[0]][:2] == (1, T)
    with pytest.raises(InputError, match="unknown hook point 'blocks.9.hook_z'"):
        attnlab.trace(model, _ids(1), hooks={"blocks.9.hook_z": lambda x, p: None})


@pytest.mark.numerics
def test_mean_ablate_equals_a_hand_computation():
    """MeanAblate of block 0's output at position 0 = a torch hook writing the reference mean computed here."""
    model = tiny_family("llama")
    ids, ref = _ids(2, seed=1), _ids(5, seed=2)
    with torch.no_grad():
        hidden = model(input_ids=ref, output_hidden_states=True, use_cache=False).hidden_states[1]  # after block 0
    mean0 = hidden[:, 0].double().mean(0).float()  # [D]: the mean over reference sequences at position 0

    def hand(mod, args, out):
        h = (out[0] if isinstance(out, tuple) else out).clone()
        h[:, 0] = mean0
        return (h,) + tuple(out[1:]) if isinstance(out, tuple) else h

    handle = model.model.layers[0].register_forward_hook(hand)
    try:
        with torch.no_grad():
            want = model(input_ids=ids, use_cache=False).logits
    finally:
        handle.remove()
    iv = attnlab.MeanAblate("blocks.0.hook_resid_post", ref, positions=(0,))
    got = attnlab.trace(model, ids, interventions=[iv], logits=True).logits
    # The same float32 forward with the same patched values: observed 0 over the numerics matrix, against 1e-5
    # (kept: the two paths may call different kernels).
    assert_close(got, want, atol=1e-5, label="mean ablate", kind="observed")
    assert np.abs(got - attnlab.trace(model, ids, logits=True).logits).max() > 1e-4


@pytest.mark.numerics
def test_the_same_call_works_on_the_toy_model():
    from attnlab.toy.model import ToyConfig, ToyTransformer

    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = ToyTransformer(ToyConfig(vocab=16, d_model=16, n_heads=2, n_layers=2, max_len=T).validate())
    ids = torch.randint(0, 16, (3, T), generator=torch.Generator().manual_seed(0))
    tr = attnlab.trace(model, ids, keep_patterns=[(1, 0)], logits=True)
    A = tr.patterns[(1, 0)]  # [N, query, key]
    # The recorder's float64 sum and numpy's float32 mean over n = 3·11 weights <= 1: within (n + 2)·2^-24 of
    # each other (was numpy's default 1e-5 relative).
    got = tr.heads.query("layer == 1 and head == 0")["sink_score"].item()
    assert_close(got, A[:, 1:, 0].mean(), atol=(A[:, 1:, 0].size + 2) * U32, label="toy sink score", kind="bound")
    assert "blocks.0.attn.hook_pattern" in attnlab.hook_points(model)

    def zero_head(z, point):
        z = z.clone()
        z[:, :, 1] = 0.0
        return z

    a = attnlab.trace(model, ids, hooks={"blocks.0.attn.hook_z": zero_head}, logits=True).logits
    b = attnlab.trace(model, ids, interventions=[attnlab.ZeroHead(0, 1)], logits=True).logits
    assert np.array_equal(a, b) and tr.logits.shape == (3, T, 16)


def test_trace_round_trips_through_save_and_load_trace(tmp_path):
    tr = attnlab.trace(tiny_family("qwen2"), _ids(), keep_patterns=[(0, 1)], logits=True)
    back = attnlab.load_trace(tr.save(tmp_path / "t"))
    assert back.heads.equals(tr.heads) and back.residuals.equals(tr.residuals)
    assert np.array_equal(back.patterns[(0, 1)], tr.patterns[(0, 1)]) and np.array_equal(back.logits, tr.logits)


def test_negative_layers_count_from_the_end_as_python_indexes():
    """Issue 40: ZeroHead(-1, 2) is ZeroHead(L - 1, 2), and keep_patterns (-1, 0) keeps (L - 1, 0), as a Python
    user expects of -1 (the tiny llama has 2 layers)."""
    model, ids = tiny_family("llama"), _ids()
    last = attnlab.trace(model, ids, interventions=[attnlab.ZeroHead(1, 2)], keep_patterns=[(1, 0)], logits=True)
    minus = attnlab.trace(model, ids, interventions=[attnlab.ZeroHead(-1, 2)], keep_patterns=[(-1, 0)], logits=True)
    assert np.array_equal(last.logits, minus.logits) and list(minus.patterns) == list(last.patterns) == ["1.0"]
    assert np.array_equal(last.patterns["1.0"], minus.patterns["1.0"])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"inputs": [[1]]}, "at least one sequence of >= 2 tokens"),
        ({"inputs": [[1, 99]]}, "token id 99 is outside the embedding's 64 rows"),
        ({"inputs": "hello"}, "string inputs need a tokenizer"),
        ({"inputs": [[1, 2]], "batch_size": 0}, "batch_size must be an integer >= 1"),
        ({"inputs": [[1.0, 2.7]]}, "token ids must be integers, got float64"),  # was cast to [1, 2] silently
        ({"inputs": torch.tensor([[1.0, 2.0]])}, "token ids must be integers, got float32"),
        ({"inputs": [[True, False]]}, "token ids must be integers, got bool"),
        ({"inputs": [[1, 2]], "interventions": [attnlab.ZeroHead(-3, 0)]}, "layer -1 is out of range|layer -3"),
    ],
)
def test_bad_inputs_are_one_line(kwargs, message):
    with pytest.raises(InputError, match=message):
        attnlab.trace(tiny_family("llama"), **kwargs)


def test_reaching_the_verbs_imports_no_torch():
    """`attnlab.trace` and the intervention values are cheap to reach: torch is imported by the call that needs it."""
    import subprocess
    import sys

    code = "import sys, attnlab; attnlab.trace, attnlab.ZeroHead, attnlab.MeanAblate, attnlab.load_run; "
    code += "print('torch' in sys.modules, set(dir(attnlab)) >= {'trace', 'hook_points', 'bb', 'scan'})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "True"], out.stderr[-2000:]


@pytest.mark.parametrize("positions", [None, (0, 3)])
@pytest.mark.parametrize("heads", [None, (1,)])
@pytest.mark.parametrize("dims", [None, (0, 2)])
def test_mean_ablate_writes_exactly_the_chosen_positions_heads_and_dims(positions, heads, dims):
    """The hook replaces x[:, t, h, d] by mean[t, h, d] exactly where t, h and d are all chosen (None: all)."""
    from attnlab.tracing.adapters.user_hooks import mean_hook

    g = torch.Generator().manual_seed(0)
    x, mean = torch.randn(2, 5, 3, 4, generator=g), torch.randn(5, 3, 4, generator=g)
    iv = attnlab.MeanAblate("blocks.0.attn.hook_z", None, positions=positions, heads=heads, dims=dims)
    got = mean_hook(iv, mean)(x, "blocks.0.attn.hook_z")
    chosen = lambda i, sel: sel is None or i in sel  # noqa: E731
    want = x.clone()
    for t, h, d in np.ndindex(5, 3, 4):
        if chosen(t, positions) and chosen(h, heads) and chosen(d, dims):
            want[:, t, h, d] = mean[t, h, d]
    assert torch.equal(got, want)


@pytest.mark.parametrize("kind", ["hf", "hf-padded", "toy"])
def test_a_trace_without_logits_keeps_none_and_its_statistics_are_unchanged(kind):
    """Issue 41: without `logits=True` no batch's [B,T,V] logits are held (nor copied into one tensor); every
    statistic is the same, bit for bit, as with them kept; kept over batches of one, each row's logits are, bit for
    bit, that sequence's traced alone (the same ops on the same [1, T] input: no tolerance needed)."""
    from attnlab.api import RunHow, _run_hf

    if kind == "toy":
        from attnlab.toy.model import ToyConfig, ToyTransformer

        with torch.random.fork_rng():
            torch.manual_seed(0)
            model = ToyTransformer(ToyConfig(vocab=16, d_model=16, n_heads=2, n_layers=2, max_len=T).validate())
        ids, mask = _ids(vocab=16), None
    else:
        model, ids = tiny_family("llama").double(), _ids()
        mask = torch.ones_like(ids).index_fill_(1, torch.tensor([0, 1]), 0) if kind == "hf-padded" else None
        mask = None if mask is None else torch.cat([torch.ones(1, T, dtype=torch.long), mask[1:]])
    without = attnlab.trace(model, ids, attention_mask=mask, batch_size=1)
    kept = attnlab.trace(model, ids, attention_mask=mask, batch_size=1, logits=True)
    assert without.logits is None and kept.logits.shape[:2] == (3, T)
    assert without.heads.equals(kept.heads) and without.residuals.equals(kept.residuals)
    start = 2 if kind == "hf-padded" else 0  # row 1's first real position
    alone = attnlab.trace(model, ids[1:2, start:], logits=True).logits[0]
    assert np.array_equal(kept.logits[1, start:], alone)
    if kind == "hf":
        assert _run_hf(model, ids, [], {}, [], 1, True, RunHow(logits=False))[1] is None


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_a_trace_without_logits_runs_no_unembedding_and_records_the_same(family):
    """Issue 41: without `logits=True`, a family whose logits are its head on the final hidden state runs its base
    model only (`TraceSession.forward_statistics`): the output embedding is never called, every statistic and every
    cached point up to `ln_final.hook_normalized` is the same, bit for bit, as in the call that kept the logits (the
    same ops on the same inputs), and those logits are the head on that final hidden state."""
    model, ids = tiny_family(family).double(), _ids()
    calls = []

    def count(mod: torch.nn.Module, args: tuple, out: torch.Tensor) -> None:  # the traced forwards (not the cache's
        if out.shape[1] == T:  # two-token probe of `ln_final`'s output width)
            calls.append(out.shape)

    handle = model.get_output_embeddings().register_forward_hook(count)
    try:
        without = attnlab.trace(model, ids, cache="ln_final.hook_normalized")
        assert calls == []
        kept = attnlab.trace(model, ids, cache="ln_final.hook_normalized", logits=True)
        assert len(calls) == 1
    finally:
        handle.remove()
    assert without.logits is None and without.heads.equals(kept.heads) and without.residuals.equals(kept.residuals)
    assert torch.equal(without.cache["ln_final.hook_normalized"], kept.cache["ln_final.hook_normalized"])
    from attnlab.tracing.fast import head_of

    _, head, post = head_of(model)
    with torch.no_grad():  # the kept logits are the head (and gemma2's soft cap) on that very final hidden state
        want = head(kept.cache["ln_final.hook_normalized"])
        assert np.array_equal(kept.logits, (want if post is None else post(want)).float().numpy())
