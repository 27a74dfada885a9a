"""R2's direct computation (bb_units): the streaming reducers and hook equivalence of spec §5 on a tiny random
toy model, library functions run with no study command and checked against the statistics computed from the full
patterns (`compute(seed, size)` returns named numbers, which reproduce saves). The unit tests that cover the same
equivalences call the same library functions; the row is in `targets.py`."""

from __future__ import annotations

from typing import Any

import numpy as np

# --- R2: the streaming reducers and hook equivalence (spec §5), on a tiny random toy model --------------------------
R2_FIELDS = ("attn_col_mean", "attn_key0_by_query", "dlogit_by_query", "row_entropy", "value_norm", "resid_norm")
R2_FORMS = {"softmax": 128, "relu": 8}  # attention -> sequence length (softmax: long enough for the fused kernel)


def r2_diff_keys() -> list[str]:
    """The names of R2's max |difference| numbers (each checked ≤ 1e-6, spec §5)."""
    keys = [f"R2_{a}_{f}_max_abs_diff" for a in R2_FORMS for f in R2_FIELDS if (a, f) != ("relu", "row_entropy")]
    return keys + [f"R2_{a}_{w}_logits_max_abs_diff" for a in R2_FORMS for w in ("traced", "hooked")]


def _toy_model(attention: str, seed: int, T: int) -> Any:
    """A tiny random `ToyTransformer` (V 12, d 16, 2 layers of 2 heads, the MLP of layer 1 removed; the model of
    tests/bb/test_adapter.py) of context `T`, built inside `fork_rng` so the caller's generator is untouched.

    In float64: §5's 1e-6 is then a test of the equivalences, not of float32 rounding. In float32 the fused
    kernel's logits were one float32 ulp (4.8e-7 at |logit| ~ 4) from the explicit path's, 2x inside 1e-6 on every
    kernel setting (issue 37); in float64 they differ by ~7e-16 (the fused kernel still runs: not 0)."""
    import torch

    from attnlab.toy.model import ToyConfig, ToyTransformer

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        cfg = ToyConfig(vocab=12, d_model=16, n_layers=2, n_heads=2, d_mlp=32, max_len=T, attn=attention, no_mlp=[1])
        return ToyTransformer(cfg).eval().double()


def dense_capture(model: Any, tokens: Any) -> dict:
    """One forward of `tokens` [N,T] with read-only hooks (the explicit attention path): float64 numpy copies of
    every layer's scores and pattern [N,L,H,T,T], v [N,L,T,H,d_h] and the residual stream [L+1,N,T,D]."""
    import torch

    got: dict[str, Any] = {}

    def grab(x: torch.Tensor, name: str) -> None:
        got[name] = x.detach().double().numpy().copy()

    L = model.cfg.n_layers
    points = ["hook_embed", *(f"blocks.{l}.attn.hook_{p}" for l in range(L) for p in ("attn_scores", "pattern", "v"))]
    points += [f"blocks.{l}.hook_resid_post" for l in range(L)]
    with torch.no_grad(), model.hooks({p: grab for p in points}):
        model(tokens)
    stack = lambda p: np.stack([got[f"blocks.{l}.attn.hook_{p}"] for l in range(L)], 1)  # noqa: E731
    resid = np.stack([got["hook_embed"], *(got[f"blocks.{l}.hook_resid_post"] for l in range(L))])
    return {"scores": stack("attn_scores"), "pattern": stack("pattern"), "v": stack("v"), "resid": resid}


def _row_entropy(A: np.ndarray) -> np.ndarray:
    """mean_{i≥1} H(A_i·)/log(i+1) over samples and queries, rows renormalised, 0·log 0 = 0: [L,H]."""
    T = A.shape[-1]
    ent = np.zeros(A.shape[:3] + (T - 1,))
    with np.errstate(invalid="ignore", divide="ignore"):
        for i in range(1, T):
            p = A[..., i, : i + 1] / A[..., i, : i + 1].sum(-1, keepdims=True)
            ent[..., i - 1] = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(-1) / np.log(i + 1)
    return ent.mean(axis=(0, 3))


def dense_statistics(model: Any, dense: dict) -> dict[str, np.ndarray]:
    """The §5 statistics computed from the full patterns of `dense_capture`, the reducers' definitions spelled out:
    ᾱ_j = (1/(T−j)) Σ_{i≥j} A_ij; A_i0 by query; Δ_i = s_i0 − mean_{1≤j≤i−1} s_ij (i ≥ 2); the row entropy;
    ‖W_O^h v^h_i‖ by an einsum over the weights; ‖x^l_i‖ — each averaged over the samples."""
    A, S, v = dense["pattern"], dense["scores"], dense["v"]
    T = A.shape[-1]
    col = np.stack([A[..., j:, j].mean(-1) for j in range(T)], -1).mean(0)
    dlogit = np.full(A.shape[1:4], np.nan)
    for i in range(2, T):
        dlogit[..., i] = (S[..., i, 0] - S[..., i, 1:i].mean(-1)).mean(0)
    w_o = np.stack([b.attn.head_output_weights().detach().double().numpy() for b in model.blocks])  # [L,H,D,d]
    vnorm = np.linalg.norm(np.einsum("lhdk,nlthk->nlhtd", w_o, v), axis=-1).mean(0)
    return {"attn_col_mean": col, "attn_key0_by_query": A[..., 0].mean(0), "dlogit_by_query": dlogit,
            "row_entropy": _row_entropy(A), "value_norm": vnorm,
            "resid_norm": np.linalg.norm(dense["resid"], axis=-1).mean(1)}  # fmt: skip


def reducer_gaps(trace: Any, dense: dict[str, np.ndarray]) -> dict[str, float]:
    """max |reducer − dense statistic| per §5 field of `dense` (Δlogit from i = 2, where it is defined)."""
    out = {}
    for name, want in dense.items():
        got = np.asarray(getattr(trace, name), dtype=float)
        got, want = (got[..., 2:], want[..., 2:]) if name == "dlogit_by_query" else (got, want)
        out[name] = float(np.abs(got - want).max())
    return out


def _logit_gaps(model: Any, tokens: Any, traced: Any) -> dict[str, float]:
    """max |Δ logits| against a plain forward (no hook: the fused kernel where it applies) of the traced forward and
    of one with an identity hook at every hook point (a hook that returns its tensor must change nothing)."""
    import torch

    with torch.no_grad():
        plain = model(tokens)
        with model.hooks({p: (lambda x, name: x) for p in model.hook_points()}):
            hooked = model(tokens)
    return {"traced": float((traced - plain).abs().max()), "hooked": float((hooked - plain).abs().max())}


def _r2_one(attention: str, seed: int) -> dict:
    """The R2 numbers of one tiny model: reducers streamed in chunks of 2 (`trace_toy`) against `dense_statistics`,
    ᾱ's range, the softmax row sums, and the logits of the traced and the hooked forwards against the plain one."""
    import torch

    from attnlab.tracing.adapters.toy import trace_toy

    T = R2_FORMS[attention]
    model = _toy_model(attention, seed, T)
    tokens = torch.randint(0, 12, (6, T), generator=torch.Generator().manual_seed(seed + 1))
    dense = dense_capture(model, tokens)
    trace, traced_logits = trace_toy(model, tokens, chunk=2)
    stats = dense_statistics(model, dense)
    if attention != "softmax":
        stats.pop("row_entropy")  # renormalised ReLU rows: tests/tracing/test_recorder.py
    out = {f"R2_{attention}_{k}_max_abs_diff": v for k, v in reducer_gaps(trace, stats).items()}
    out |= {f"R2_{attention}_{k}_logits_max_abs_diff": v for k, v in _logit_gaps(model, tokens, traced_logits).items()}
    col = np.asarray(trace.attn_col_mean)
    out[f"R2_{attention}_attn_col_mean_min"], out[f"R2_{attention}_attn_col_mean_max"] = col.min(), col.max()
    if attention == "softmax":
        out["R2_softmax_row_sum_max_abs_error"] = float(np.abs(dense["pattern"].sum(-1) - 1).max())
    return out


def bb_units(seed: int, size: dict) -> dict:
    """R2 (spec §5) on a tiny softmax (T 128) and a tiny ReLU (T 8) toy model: `_r2_one` of each (the functions
    tests/tracing/test_recorder.py and tests/bb/test_adapter.py check)."""
    return {**_r2_one("softmax", seed), **_r2_one("relu", seed)}
