"""Issue 40's leftovers: every cached point has the shape docs/api.md's table gives it, on every family; a hooked
(uncached) pattern is refused in one line when one layer's [B, H, T, T] working set does not fit; a padded batch's
gradients under grad=True equal each sequence's traced alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import attnlab
from attnlab.errors import InputError
from tests.real.families import FAMILIES, tiny_family

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
B, T = 2, 6


def documented_shapes() -> dict[str, str]:
    """{point suffix: shape} from docs/api.md's "Every point and its shape" table ('attn.hook_k': 'B,T,H_kv,d_head')."""
    text = DOC.read_text()
    table = text[text.index("### Every point and its shape") :]
    rows = re.findall(r"^\| `([^`]+)` \| \[([^\]]+)\] \|", table, flags=re.M)
    shapes = {point.removeprefix("blocks.{l}."): shape.replace(" ", "") for point, shape in rows}
    assert len(shapes) >= 13, shapes  # the table was found and read whole
    return shapes


def sizes_from_config(cfg) -> dict[str, int]:
    """The table's symbols from the transformers config alone (not from attnlab's architecture discovery)."""
    H = int(cfg.num_attention_heads)
    D = int(cfg.hidden_size)
    d_head = getattr(cfg, "head_dim", None) or D // H
    if getattr(cfg, "qk_nope_head_dim", None):  # multi-head latent attention: q/k wider than the values
        d_head = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    d_v = getattr(cfg, "v_head_dim", None) or d_head
    H_kv = getattr(cfg, "num_key_value_heads", None) or H
    return {"B": B, "T": T, "query": T, "key": T, "H": H, "H_kv": int(H_kv), "D": D, "d_head": d_head, "d_v": d_v}


def layer_points(model) -> list[str]:
    """A handful of points: the model-level ones and every point of the last block (OPT-style blocks included)."""
    points = attnlab.hook_points(model)
    last = max(int(p.split(".")[1]) for p in points if p.startswith("blocks."))
    return [p for p in points if not p.startswith("blocks.") or p.startswith(f"blocks.{last}.")]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_cached_shapes_are_the_documented_ones(family):
    """Each cached point's shape equals docs/api.md's, its symbols read from the family's config. OPT's
    hook_mlp_out (fc2 on flattened [B·T, D] tokens) is [B, T, D] like every other family's."""
    model = tiny_family(family)
    ids = torch.randint(3, 60, (B, T), generator=torch.Generator().manual_seed(0))
    doc, size = documented_shapes(), sizes_from_config(model.config)
    points = layer_points(model)
    tr = attnlab.trace(model, ids, cache=points)
    assert set(tr.cache) == set(points)
    for point in points:
        suffix = re.sub(r"^blocks\.\d+\.", "", point)
        want = tuple(size[s] for s in doc[suffix].split(","))
        assert tuple(tr.cache[point].shape) == want, f"{family} {point}: {tuple(tr.cache[point].shape)} != {want}"


def test_opt_mlp_out_hook_sees_and_replaces_batch_pos_dmodel():
    """A hook at OPT's hook_mlp_out sees [B, T, D], and a tensor it returns replaces the MLP output: doubling fc2's
    output equals doubling fc2's weights and bias (fc2 is linear)."""
    model = tiny_family("opt").double()
    ids = torch.randint(3, 60, (B, T), generator=torch.Generator().manual_seed(1))
    seen = []

    def double(x, hook):
        seen.append(tuple(x.shape))
        return 2 * x

    hooked = attnlab.trace(model, ids, hooks={"blocks.1.hook_mlp_out": double}, logits=True).logits
    fc2 = model.model.decoder.layers[1].fc2
    with torch.no_grad():
        fc2.weight.mul_(2)
        fc2.bias.mul_(2)
    doubled = attnlab.trace(model, ids, logits=True).logits
    assert seen == [(B, T, model.config.hidden_size)]
    assert abs(hooked - doubled).max() < 1e-10  # float64, same operations up to the order of one product


def pattern_need(model, n: int, T: int) -> int:
    """The documented working set of one hooked layer: HOOKED_COPIES [n, H, T, T] float32 tensors."""
    from attnlab.tracing.adapters.user_hooks import HOOKED_COPIES

    return HOOKED_COPIES * n * model.config.num_attention_heads * T * T * 4


@pytest.mark.parametrize("point", ["attn.hook_pattern", "attn.hook_attn_scores"])
def test_hooked_pattern_refused_at_the_memory_boundary(monkeypatch, point):
    """A hook (no cache) on a pattern or scores point is refused in one line, before any forward, when one layer's
    [b, H, T, T] working set exceeds the limit (b = min(batch_size, N)); at the limit it runs."""
    from attnlab.runs import budget

    model = tiny_family("llama")
    ids = torch.randint(3, 60, (3, T), generator=torch.Generator().manual_seed(2))
    calls = []
    hooks = {f"blocks.1.{point}": lambda x, hook: calls.append(x.shape)}
    need = pattern_need(model, 2, T)  # batch_size=2: forwards of 2 and 1 sequences
    monkeypatch.setattr(budget, "memory_limit", lambda: need - 1)
    with pytest.raises(InputError, match=point.split(".")[-1]):
        attnlab.trace(model, ids, hooks=hooks, batch_size=2)
    assert calls == []  # refused before the model ran
    monkeypatch.setattr(budget, "memory_limit", lambda: need)
    attnlab.trace(model, ids, hooks=hooks, batch_size=2)
    assert [tuple(s) for s in calls] == [(2, 4, T, T), (1, 4, T, T)]


def test_unhooked_points_need_no_pattern_memory(monkeypatch):
    """Hooks elsewhere (hook_z) make no [B, H, T, T]: the pattern check does not refuse them."""
    from attnlab.runs import budget

    model = tiny_family("llama")
    ids = torch.randint(3, 60, (2, T), generator=torch.Generator().manual_seed(2))
    monkeypatch.setattr(budget, "memory_limit", lambda: pattern_need(model, 1, T) - 1)
    attnlab.trace(model, ids, hooks={"blocks.1.attn.hook_z": lambda x, hook: None})


@pytest.mark.parametrize("point", ["blocks.0.attn.hook_z", "blocks.0.hook_resid_mid", "blocks.0.attn.hook_pattern"])
def test_padded_grad_equals_alone(point):
    """grad=True on strings of different lengths (padded): the gradient of a sequence's layer-1 sink score
    (`tr.grad_stats`) with respect to its cached activation and to the weights equals that of the same sequence
    traced alone. Float64: the same operations on the same numbers, within 1e-12 (a few float64 roundings)."""
    from tests.real.conftest import byte_level_tokenizer

    tok, vocab = byte_level_tokenizer()
    model = tiny_family("llama", vocab_size=len(vocab)).double()
    texts = ["a cat sat", "the dog ran far away"]  # 9 and 20 bytes: padded on the right
    padded = attnlab.trace(model, texts, tokenizer=tok, grad=True, cache=[point])
    weights = [model.model.layers[0].self_attn.q_proj.weight, model.model.embed_tokens.weight]
    for row, text in enumerate(texts):
        alone = attnlab.trace(model, [text], tokenizer=tok, grad=True, cache=[point])
        got = padded.grad_stats["sink_score"][row, 1].sum()
        ref = alone.grad_stats["sink_score"][0, 1].sum()
        assert abs(got - ref) < 1e-12
        x_got = padded.cache[point][row]  # one tensor per sequence (lengths differ), each in the graph
        g_got = torch.autograd.grad(got, [x_got, *weights], retain_graph=True)
        g_ref = torch.autograd.grad(ref, [alone.cache[point], *weights])
        assert g_ref[0].abs().max() > 1e-6  # the gradient is not trivially zero
        assert abs(g_got[0] - g_ref[0][0]).max() < 1e-12
        for a, b in zip(g_got[1:], g_ref[1:]):
            assert abs(a - b).max() < 1e-12


@pytest.mark.parametrize("point", ["blocks.0.hook_resid_mid", "blocks.0.hook_mlp_out"])
def test_opt_flattened_points_carry_gradients(point):
    """OPT runs its MLP on [B·T, D] tokens: under grad=True the cached [B, T, D] tensor at resid_mid / mlp_out is
    in the graph, and the gradient of a sink score with respect to it equals the central finite difference along a
    random unit direction δ added by a hook. Float64: error ≲ h²|f'''|/6 + 2ε|f|/h ~ 2e-10 + 1e-11 (h = 1e-5,
    |f'''| ≲ 10 along a unit direction, |f| ≲ 1); bound 1e-8."""
    model = tiny_family("opt").double()
    ids = torch.randint(3, 60, (B, T), generator=torch.Generator().manual_seed(3))
    g = attnlab.trace(model, ids, grad=True, cache=[point])
    (grad,) = torch.autograd.grad(g.grad_stats["sink_score"][:, 1].sum(), g.cache[point])
    delta = torch.randn(grad.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    delta = delta / delta.norm()  # unit Frobenius norm
    h = 1e-5

    def sink(eps: float) -> float:  # grad_stats: float64 (the numpy statistics are recorded in float32)
        tr = attnlab.trace(model, ids, hooks={point: lambda x, hook: x + eps * delta}, grad=True)
        return float(tr.grad_stats["sink_score"][:, 1].sum().detach())

    fd = (sink(h) - sink(-h)) / (2 * h)
    assert abs(float((grad * delta).sum()) - fd) < 1e-8
    assert abs(fd) > 1e-3  # the direction moves the score
