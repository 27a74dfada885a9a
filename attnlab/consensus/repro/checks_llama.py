"""The direct computations of consensus on tiny random Llama models (issue 18): R8 (a random Llama-shaped stack
collapses, with the stack fixed or redrawn per pass, MLP on and off) and C-llama (spec 7: the four clauses against
the model's own forward or a computation by hand). Each `compute(seed, size)` returns named numbers, which reproduce
saves; tests/consensus/test_realmodel.py checks the same functions; the rows are in `targets.py`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def tiny_llama(dtype: Any = None, layers: int = 2, d: int = 64, heads: int = 4, kv: int = 2, seed: int = 0,
               init_std: float | None = None) -> Any:  # fmt: skip
    """A random `LlamaForCausalLM` (vocabulary 97, MLP width 2d), as tests/consensus/test_realmodel.py builds it:
    the library's initialiser under `seed` (in `torch.random.fork_rng`, so the caller's generator is untouched);
    `init_std` redraws every Linear weight of the decoder layers from N(0, init_std^2)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=97, hidden_size=d, intermediate_size=2 * d, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=128)  # fmt: skip
    with torch.random.fork_rng():  # the library initialisers draw from the global generator
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg).eval().to(dtype or torch.float32)
        if init_std is not None:
            for mod in (m for lay in model.model.layers for m in lay.modules()):
                if isinstance(mod, torch.nn.Linear):
                    torch.nn.init.normal_(mod.weight, 0.0, init_std)
    return model


def llama_stack_curves(variant: str, mlp: bool, passes: int, seed: int) -> np.ndarray:
    """R8 for one case, as tests/consensus/test_realmodel.py::test_random_llama_stack_collapses: a random Llama-shaped
    stack (4 layers, d = 128, 4 heads, 2 KV heads, Linear std 0.02), 4 prompts of T = 32 random ids (the same for
    every case), `passes` passes, fixed (`periodic`) or redrawn per pass (`random`): log10 E_first of each prompt
    after each pass, [prompts, passes]."""
    import torch

    from attnlab.consensus.realmodel import StackRunner, iterate_stack

    runner = StackRunner(tiny_llama(layers=4, d=128, heads=4, kv=2, seed=seed + 7, init_std=0.02))
    ids = torch.randint(0, 97, (4, 32), generator=torch.Generator().manual_seed(seed + 8))
    with torch.no_grad():
        E = iterate_stack(runner, ids, variant, passes=passes, mlp=mlp, depth_view=False).curves["E_first"]
    return np.log10(E[:, np.arange(4, E.shape[1], 4)])  # after each pass of the 4 layers


def collapse_stats(curves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """R8's two numbers of per-prompt curves [..., prompts, passes] (log10 E_first after each pass): the Spearman of
    pass against the mean over prompts m, and the drop 10^(m_1 - m_last); each [...]. Spearman = Pearson correlation
    of the ranks (ties averaged, as `stats.spearman`) with the passes' ranks."""
    from scipy.stats import rankdata

    m = curves.mean(-2)  # [..., passes]
    r = rankdata(m, axis=-1) - (m.shape[-1] + 1) / 2
    x = np.arange(m.shape[-1]) - (m.shape[-1] - 1) / 2
    with np.errstate(invalid="ignore", divide="ignore"):  # a flat curve: no rank correlation (nan, so missed)
        rho = (r * x).sum(-1) / np.sqrt((r * r).sum(-1) * (x * x).sum())
    return rho, 10 ** (m[..., 0] - m[..., -1])


def llama_stack_collapse(variant: str, mlp: bool, passes: int, seed: int) -> tuple[float, float]:
    """R8 for one case (`llama_stack_curves`): (Spearman of pass against the mean over prompts of log10 E_first at
    each pass end, the drop 10^(m_1 - m_last))."""
    rho, drop = collapse_stats(llama_stack_curves(variant, mlp, passes, seed))
    return float(rho), float(drop)


R8_CASES = tuple((variant, mlp) for variant in ("periodic", "random") for mlp in (True, False))


def worst_case_bootstrap(curves: np.ndarray, seed: int) -> dict[str, Any]:
    """R8's 95 % intervals from curves [cases, prompts, passes]: the percentile bootstrap over prompts (the same
    resampled prompts in every case, as they are the same prompts) of the largest Spearman and the smallest drop
    over the cases (`collapse_stats`), with `intervals.bootstrap_interval` ({key: Interval}); both numbers from the
    same resamples (one generator seeded `seed` each)."""
    from attnlab.core.intervals import bootstrap_interval

    def over(which: int, worst: Any) -> Any:
        return lambda idx: worst(collapse_stats(curves[:, idx.astype(int)])[which], 0)  # [R, n] -> [R]

    prompts = [float(i) for i in range(curves.shape[1])]  # the resampled indices, as values
    return {key: bootstrap_interval(prompts, np.random.default_rng(seed), over="prompts", statistic=over(i, worst))
            for key, i, worst in (("R8_max_spearman", 0, np.max), ("R8_min_drop", 1, np.min))}  # fmt: skip


def cons_llama_stack(seed: int, size: dict) -> dict:
    """R8: every case (stack fixed or redrawn per pass, MLP on and off): Spearman and drop; the largest Spearman and
    the smallest drop; their 95 % percentile bootstrap over the 4 prompts (`worst_case_bootstrap`, `_low`/`_high`);
    per prompt, the worst case of its own curve (`R8_max_spearman prompt<i>`, `R8_min_drop prompt<i>`, shown)."""
    from attnlab.consensus.repro.checks_theory import per_start_numbers

    curves = np.stack([llama_stack_curves(variant, mlp, size["passes"], seed) for variant, mlp in R8_CASES])
    rho, drop = collapse_stats(curves)  # [cases]
    out: dict[str, float] = {}
    for (variant, mlp), r, d in zip(R8_CASES, rho, drop):
        case = f"{variant}, MLP {'on' if mlp else 'off'}"
        out[f"R8_spearman {case}"], out[f"R8_drop {case}"] = float(r), float(d)
    out |= {"R8_max_spearman": float(rho.max()), "R8_min_drop": float(drop.min()), "R8_passes": size["passes"]}
    for key, iv in worst_case_bootstrap(curves, seed).items():
        out |= {f"{key}_low": iv.low, f"{key}_high": iv.high, "R8_prompts": iv.replicates}
    own_rho, own_drop = collapse_stats(curves[:, :, None])  # [cases, prompts]: each prompt's own curve
    return (out | per_start_numbers("R8_max_spearman", own_rho.max(0), "prompt")
            | per_start_numbers("R8_min_drop", own_drop.min(0), "prompt"))  # fmt: skip


def _llama_pass_error(dtype: Any) -> float:
    """C-llama: one layer-by-layer pass (`StackRunner.layer_step`) of the tiny Llama in `dtype` against the model's
    own forward (transformers): the largest |difference| of the state after each layer (`hidden_states`) and of the
    final-normed output (`last_hidden_state`), 3 prompts of 12 random ids."""
    import torch

    from attnlab.consensus.realmodel import StackRunner

    model = tiny_llama(dtype)
    ids = torch.randint(0, 97, (3, 12), generator=torch.Generator().manual_seed(1))
    runner = StackRunner(model)
    with torch.no_grad():
        out = model.model(ids, output_hidden_states=True)
        h, ctx = runner.prepare(ids)
        errs = []
        for i, lay in enumerate(runner.layers):
            h = runner.layer_step(lay, h, ctx, True)
            if i + 1 < runner.n_layers:  # the last entry of hidden_states is after the final norm
                errs.append(float((out.hidden_states[i + 1] - h).abs().max()))
        errs.append(float((out.last_hidden_state - runner.final(h)).abs().max()))
    return max(errs)


def _rope(x: Any, cos: Any, sin: Any) -> Any:
    """Rotary embedding by hand: x cos + rotate_half(x) sin, rotate_half(x) = (-x_2, x_1) on the two halves."""
    import torch

    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


def _mlp_off_error() -> float:
    """C-llama: a layer step with the MLP off against x + o_proj(attn(norm(x))) by hand (float64, layer 1): the
    model's own input norm, q/k/v projections and rotary tables, our RoPE, grouped KV heads, causal softmax."""
    import torch

    from attnlab.consensus.realmodel import StackRunner

    model = tiny_llama(torch.float64)
    H, KV = model.config.num_attention_heads, model.config.num_key_value_heads
    dh = model.config.hidden_size // H
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(2))
    runner = StackRunner(model)
    lay, a = runner.layers[1], runner.layers[1].self_attn
    with torch.no_grad():
        x, ctx = runner.prepare(ids)
        ours = runner.layer_step(lay, x, ctx, mlp=False)
        B, T, _ = x.shape
        cos, sin = (r[:, None] for r in model.model.rotary_emb(x, torch.arange(T).unsqueeze(0)))
        n = lay.input_layernorm(x)
        q, k, v = (p(n).view(B, T, -1, dh).transpose(1, 2) for p in (a.q_proj, a.k_proj, a.v_proj))
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
        s = (q @ k.transpose(-1, -2) / math.sqrt(dh)).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf)
        by_hand = x + a.o_proj((torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, H * dh))
    return float((ours - by_hand).abs().max())


def _first_position() -> tuple[float, float]:
    """C-llama: two prompts with the same first id and other tokens 2..T, 12 periodic layer steps in float64: the
    largest |difference| of position 0's states over the steps (0: bitwise equal) and whether position 1 differs at
    the end (1.0: the context does reach the later positions)."""
    import torch

    from attnlab.consensus.realmodel import StackRunner

    runner = StackRunner(tiny_llama(torch.float64))
    ids = torch.randint(0, 97, (2, 10), generator=torch.Generator().manual_seed(3))
    ids[1, 0] = ids[0, 0]
    diff = 0.0
    with torch.no_grad():
        h, ctx = runner.prepare(ids)
        for k in range(1, 13):
            h = runner.layer_step(runner.layer_at("periodic", k, 0, 0), h, ctx, True)
            diff = max(diff, float((h[0, 0] - h[1, 0]).abs().max()))
    return diff, float(not torch.equal(h[0, 1], h[1, 1]))


def _random_redraws() -> dict:
    """C-llama: the random variant's stacks (`StackRunner.random_stack`): two runners with seed 5 give the same
    weights (largest |difference| of q_proj of layer 1), seeds 5 and 6 (consecutive passes) differ, pass 2 uses a
    new stack object, and the std of the drawn weights (the library's initialiser, 0.02)."""
    from attnlab.consensus.realmodel import StackRunner

    model = tiny_llama()
    a, b = StackRunner(model), StackRunner(model)
    w = lambda r, s: r.random_stack(s)[1].self_attn.q_proj.weight.detach().clone()  # noqa: E731
    same, other = float((w(a, 5) - w(b, 5)).abs().max()), float((w(a, 5) - w(a, 6)).abs().max())
    new = a.layer_at("random", 1, 0, 5) is not a.layer_at("random", a.n_layers + 1, 0, 5)
    return {"C-llama_same_seed_max_abs_diff": same, "C-llama_next_pass_max_abs_diff": other,
            "C-llama_next_pass_new_stack": float(new), "C-llama_random_weight_std": float(w(a, 5).std())}  # fmt: skip


def cons_llama_units(seed: int, size: dict) -> dict:
    """C-llama (spec 7, tiny random LlamaConfig: 2 layers, d = 64, 4 heads, 2 KV heads): the four clauses, each
    against the model's own forward or a computation by hand (tests/consensus/test_realmodel.py)."""
    import torch

    pos0, later = _first_position()
    return {"C-llama_fp32_max_abs_err": _llama_pass_error(torch.float32),
            "C-llama_fp64_max_abs_err": _llama_pass_error(torch.float64),
            "C-llama_mlp_off_by_hand_max_abs_err": _mlp_off_error(), "C-llama_pos0_max_abs_diff": pos0,
            "C-llama_later_positions_differ": later, **_random_redraws()}  # fmt: skip
