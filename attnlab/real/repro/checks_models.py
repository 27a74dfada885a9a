"""The direct computations behind some reproduction targets of real models: library functions run with no study
command (each `compute(seed, size)` returns named numbers, which reproduce saves). `real_probe`: SmolLM2's greedy
token with and without dim 507, and its cached reload time; `real_units`: R15 (spec §10.2), the attention
function, pre-o_proj ablation and move-to-sink on tiny random HF models, checked against the eager computation. The
unit tests that cover the same functions call them too; the rows are in `targets.py`."""

from __future__ import annotations

import time
from typing import Any

import numpy as np


def real_probe(seed: int, size: dict) -> dict:
    """Greedy next token after "The capital of France is", the same with dim 507 zeroed after block 11, and the
    time of a cached reload of SmolLM2."""
    import torch

    from attnlab.hf.loader import load_causal_lm
    from attnlab.tracing.adapters.hf import forward_logits
    from attnlab.tracing.interventions import ZeroDims

    load_causal_lm("smollm2")  # builds the fp32 cache on the first call
    t0 = time.perf_counter()
    lm = load_causal_lm("smollm2")
    reload_s = time.perf_counter() - t0
    ids = torch.tensor([lm.tokenizer("The capital of France is", add_special_tokens=False)["input_ids"]])
    clean = int(forward_logits(lm.model, ids)[0, -1].argmax())
    ablated = int(forward_logits(lm.model, ids, interventions=[ZeroDims(11, (507,), (0,))])[0, -1].argmax())
    return {
        "greedy": lm.tokenizer.decode([clean]),
        "greedy_dim507_zeroed": lm.tokenizer.decode([ablated]),
        "reload_seconds": reload_s,
    }


# --- R15 (spec §10.2): the attention function, pre-o_proj ablation and move-to-sink on tiny random HF models ----------
R15_T = 12
R15_FAMILIES = {  # name -> (model type, heads, KV heads, seed): the models of tests/real/test_tracing.py, and Qwen2
    "llama-gqa": ("llama", 4, 2, 0),
    "llama-mha": ("llama", 2, 2, 1),
    "llama-mqa": ("llama", 4, 1, 2),
    "qwen2": ("qwen2", 4, 2, 0),
    "gpt2": ("gpt2", 2, 2, 0),
}
R15_STATS = ("attn_col_mean", "attn_key0_by_query", "attn_key0_by_token", "row_entropy", "sink_score_per_sample",
             "key0_col_mean_per_sample")  # fmt: skip
R15_DIFFS = ("logits_vs_eager", "weights_vs_output_attentions", "stats_vs_output_attentions", "resid_vs_hidden_states",
             "ablation_vs_hand", "ablation_earlier_layer_change", "move_to_sink_off_one_hot")  # fmt: skip


def tiny_hf_model(kind: str, heads: int, kv: int, seed: int) -> Any:
    """A tiny random causal LM built from its config (V 64, d 32, 2 layers; no download), in eval mode, seeded
    inside `fork_rng` so the caller's generator is untouched."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    common: dict[str, Any] = dict(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=heads,
        num_key_value_heads=kv, max_position_embeddings=64,
    )  # fmt: skip
    build = {
        "llama": lambda: LlamaForCausalLM(LlamaConfig(**common)),
        "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**common)),
        "gpt2": lambda: GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=heads, n_positions=64,
                                                   bos_token_id=0, eos_token_id=0)),
    }[kind]  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build().eval()


def _eager(model: Any, ids: Any) -> Any:
    """transformers' own eager forward with `output_attentions` and `output_hidden_states` (the reference)."""
    import torch

    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            return model(input_ids=ids, output_attentions=True, output_hidden_states=True, use_cache=False)
    finally:
        model.set_attn_implementation("sdpa")


def _max_diff(a: Any, b: Any) -> float:
    return float(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float)).max())


def _recorded_vs_eager(model: Any, ids: Any) -> dict[str, float]:
    """The "attnlab" attention function (streamed in query chunks: `traced(..., chunk_elements=40, stats="chunked")`)
    against eager attention: logits, every head's kept pattern against `output_attentions`, the reducers against
    the same recorder fed the eager weights, and the residual norms against `output_hidden_states`."""
    from attnlab.tracing.adapters.arch import get_arch
    from attnlab.tracing.adapters.hf import new_recorder, traced
    from attnlab.tracing.recorder import TraceRecorder

    arch = get_arch(model)
    keep = [(l, h) for l in range(arch.n_layers) for h in range(arch.n_heads)]
    rec = new_recorder(model, R15_T, keep_patterns=keep, vocab_size=64)
    with traced(model, rec, chunk_elements=40, stats="chunked") as session:
        logits = session.forward(ids)
    tr, ref = rec.result(), _eager(model, ids)
    base = TraceRecorder(arch.n_layers, arch.n_heads, R15_T, vocab_size=64)
    base.begin_batch(ids)
    for l, A in enumerate(ref.attentions):
        base.attention(l, A)
    want = base.result()
    resid = [ref.hidden_states[r].double().norm(dim=-1).mean(0).numpy() for r in range(arch.n_layers)]
    return {
        "logits_vs_eager": _max_diff(logits, ref.logits),
        "weights_vs_output_attentions": max(
            _max_diff(tr.patterns[f"{l}.{h}"], ref.attentions[l][:, h]) for l, h in keep
        ),
        "stats_vs_output_attentions": max(_max_diff(getattr(tr, f), getattr(want, f)) for f in R15_STATS),
        "resid_vs_hidden_states": max(_max_diff(tr.resid_norm[r], resid[r]) for r in range(arch.n_layers)),
    }


def _ablation_vs_hand(model: Any, ids: Any, hand_head: int | None = None) -> dict[str, float]:
    """`ZeroHead(1, H−1)` zeroes head H−1's slice of o_proj's input: the attention output changes by exactly that
    head's contribution W_O^h z^h (z read at `attn.hook_z`; `hand_head`: another head's, to show a mismatch), and
    block 0's output not at all."""
    from attnlab.tracing.adapters.arch import get_arch
    from attnlab.tracing.adapters.hf import traced
    from attnlab.tracing.interventions import ZeroHead

    arch = get_arch(model)
    layer, head, D = 1, arch.n_heads - 1, arch.head_dim

    def run(interventions: list) -> dict:
        seen: dict = {}
        grab = lambda key: lambda x, name: seen.__setitem__(key, x.detach().clone())  # noqa: E731
        hooks = {"blocks.1.attn.hook_z": grab("z"), "blocks.1.hook_attn_out": grab("y"),
                 "blocks.0.hook_resid_post": grab("b0")}  # fmt: skip
        with traced(model, None, interventions, hooks=hooks) as session:
            session.forward(ids)
        return seen

    clean, abl = run([]), run([ZeroHead(layer, head)])
    h = head if hand_head is None else hand_head
    z = clean["z"][:, :, h]  # [B,T,d_h] of the clean forward
    contribution = z @ arch.w_o(layer)[:, h * D : (h + 1) * D].T.detach()
    return {"ablation_vs_hand": _max_diff(clean["y"] - abl["y"], contribution),
            "ablation_earlier_layer_change": _max_diff(clean["b0"], abl["b0"])}  # fmt: skip


def _move_to_sink(model: Any, ids: Any) -> dict[str, float]:
    """`MoveToSink(0, H−1)`: that head's recorded rows are one-hot on key 0; head 0's mean key-0 weight is not."""
    from attnlab.tracing.adapters.arch import get_arch
    from attnlab.tracing.adapters.hf import new_recorder, traced
    from attnlab.tracing.interventions import MoveToSink

    head = get_arch(model).n_heads - 1
    rec = new_recorder(model, R15_T, keep_patterns=[(0, head)])
    with traced(model, rec, [MoveToSink(0, head)]) as session:
        session.forward(ids)
    tr = rec.result()
    one_hot = np.zeros((len(ids), R15_T, R15_T))
    one_hot[..., 0] = 1.0
    return {"move_to_sink_off_one_hot": _max_diff(tr.patterns[f"0.{head}"], one_hot),
            "move_to_sink_other_head_sink": float(tr.sink_score()[0, 0])}  # fmt: skip


def real_units(seed: int, size: dict) -> dict:
    """R15 on each tiny family of `R15_FAMILIES` (the functions tests/real/test_tracing.py checks): max |Δ| of the
    recorded against the eager attention, of the ablation against the hand computation, of move-to-sink's rows
    against one-hot on key 0 (`R15_<family>_<what>`)."""
    import torch

    out: dict[str, float] = {}
    for name, (kind, heads, kv, s) in R15_FAMILIES.items():
        model = tiny_hf_model(kind, heads, kv, seed + s)
        ids = torch.randint(0, 64, (3, R15_T), generator=torch.Generator().manual_seed(seed))
        numbers = {**_recorded_vs_eager(model, ids), **_ablation_vs_hand(model, ids), **_move_to_sink(model, ids)}
        out |= {f"R15_{name}_{k}": v for k, v in numbers.items()}
    return out
