"""TransformerLens's attention and residual hook points on transformers models (issue 40, items 1 and 3).

Inside the "attnlab" attention function (`hf_attention.attention`) a layer whose session holds hooks at
`attn.hook_q`, `attn.hook_k` or `attn.hook_v` shows them the tensors the family's attention function receives:

    hook_q [B, T, H, d_head]       after the q projection, its q-norm and RoPE (TransformerLens's `hook_rot_q`)
    hook_k [B, T, H_kv, d_head]    after the k projection, k-norm and RoPE, with the model's H_kv KV heads (GQA
                                   not expanded, as TransformerLens's grouped-query `hook_rot_k`)
    hook_v [B, T, H_kv, d_v]       the value projection's output, H_kv heads

and a tensor a hook returns is what the layer goes on with. A layer with a hook (or a cache) at
`attn.hook_attn_scores` or `attn.hook_pattern`, and every layer under `grad=True`, runs `hooked_attention`: eager
attention with the whole [B, H, T, T] scores made, as TransformerLens makes them (spec extreme-tokens §5):

    s_ij = c·tanh(q_i·k_j·scaling / c) (soft-capping only where the family has it), then −inf where key j is hidden
           (the future, a sliding window, padding): hook_attn_scores [B, H, query, key]
    A_i· = softmax_j(s_i·) (with gpt-oss's learned sink logit as one more column, dropped after; a row with no
           visible key is 0): hook_pattern [B, H, query, key]
    z_i = Σ_j A_ij v_{g(h),j}, g(h) = h ÷ (H/H_kv)

so an edited pattern (or edited scores) is what the layer's output is made from; then `MoveToSink`, then the
recorder sees the edited pattern. Every other layer keeps the fused (or chunked) path: only hooked layers pay T².

`hook_resid_mid` (after attention, before the MLP) is found by one discovery forward of two tokens
(`resid_mid_sites`): the tensor the block's pre-MLP norm normalises (Llama's `post_attention_layernorm`, Gemma 2's
`pre_feedforward_layernorm`, GPT-2's `ln_2`), or the MLP's own input where no norm precedes it (OLMo 2). A
replacement is written into that tensor in place, so the block's residual sum uses it too. Parallel blocks (Phi,
GPT-NeoX, Cohere: attention and MLP both read the block's input) have no such point: `resid_mid_sites` says why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from attnlab.tracing.adapters.arch import Arch, is_norm
from attnlab.tracing.adapters.hf_attention import MASKED, _expand_kv, _logit_rows, _move_to_sink
from attnlab.tracing.fast import value_norms

if TYPE_CHECKING:
    from attnlab.tracing.adapters.hf import TraceSession

QKV = ("attn.hook_q", "attn.hook_k", "attn.hook_v")
PATTERN_POINTS = ("attn.hook_attn_scores", "attn.hook_pattern")
ATTN_POINTS = QKV + PATTERN_POINTS
# a session's hooks inside the attention function: layer -> {point suffix: fn(x) -> replacement or None}
AttnHooks = dict[int, dict[str, Callable[[torch.Tensor], torch.Tensor | None]]]


def apply_qkv_hooks(
    hooks: dict[str, Callable[[torch.Tensor], torch.Tensor | None]], qkv: tuple[torch.Tensor, ...]
) -> tuple[torch.Tensor, ...]:
    """(query [B,H,T,d], key, value [B,H_kv,T,d]) after the hooks at hook_q/k/v, each shown as [B,T,heads,d]."""
    out = []
    for point, x in zip(QKV, qkv, strict=True):
        fn = hooks.get(point)
        shown = x.transpose(1, 2)
        y = None if fn is None else fn(shown)
        # with no replacement the layer goes on from the view the hook saw (the same memory: under autograd a
        # cached activation is then part of the graph)
        out.append(x if fn is None else shown.transpose(1, 2) if y is None else y.transpose(1, 2).contiguous())
    return tuple(out)


def _visible(mask: torch.Tensor | None, T: int, Tk: int, window: int | None, device: torch.device) -> torch.Tensor:
    """[B|1, 1|H, T, Tk] bool, True where query i sees key j: transformers' mask (bool, or additive with hidden
    entries at the dtype's minimum), else causal with the layer's sliding window (keys i−W+1..i)."""
    if mask is not None:
        m = mask[..., :T, :Tk]
        return m if m.dtype == torch.bool else m > MASKED / 2
    i = torch.arange(T, device=device).unsqueeze(1) + (Tk - T)
    j = torch.arange(Tk, device=device).unsqueeze(0)
    vis = j <= i
    if window is not None and window < Tk:
        vis = vis & (j > i - window)
    return vis.view(1, 1, T, Tk)


def _softmax_rows(s: torch.Tensor, sinks: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(A [B,H,T,Tk], learned-sink mass [B,H,T] or None) = softmax over keys (fp32 at least; the sink logit as one
    more column); rows whose every score is −inf (no visible key) are 0. Out of place, so autograd can run."""
    dtype = torch.float32 if s.dtype in (torch.float16, torch.bfloat16) else s.dtype
    s = s.to(dtype)
    empty = torch.isneginf(s).all(-1, keepdim=True)
    s = s.masked_fill(empty, 0.0)
    if sinks is None:
        return torch.softmax(s, -1).masked_fill(empty, 0.0), None
    col = sinks.to(dtype).view(1, -1, 1, 1).expand(*s.shape[:3], 1)
    both = torch.softmax(torch.cat([s, col], -1), -1).masked_fill(empty, 0.0)
    return both[..., :-1], both[..., -1]


def differentiable_stats(A: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-sequence statistics of one layer's pattern A [B,H,T,T] as torch tensors that keep A's graph (the
    `Trace`'s definitions, spec extreme-tokens §5): `sink_score` [B,H] (1/(T−1)) Σ_{i≥1} A_i0, `key0_col_mean`
    [B,H] (1/T) Σ_i A_i0, `attn_col_mean` [B,H,T] ᾱ_j = Σ_{i≥j} A_ij / (T−j), `row_entropy` [B,H] the mean over
    non-empty rows i ≥ 1 of H(A_i·/ΣA_i·)/log(i+1)."""
    T = A.shape[-1]
    j = torch.arange(T, device=A.device, dtype=A.dtype)
    rows = A[:, :, 1:]
    mass = rows.sum(-1, keepdim=True)
    p = rows / mass.clamp_min(1e-300)
    ent = -torch.where(p > 0, p * p.clamp_min(1e-300).log(), torch.zeros((), dtype=A.dtype, device=A.device)).sum(-1)
    full = (mass.squeeze(-1) > 0).to(A.dtype)
    ent = (ent / torch.log(j[1:] + 1.0) * full).sum(-1) / full.sum(-1).clamp_min(1.0)
    return {
        "sink_score": rows[..., 0].mean(-1),
        "key0_col_mean": A[..., 0].mean(-1),
        "attn_col_mean": A.sum(-2) / (T - j),
        "row_entropy": ent,
    }


def hooked_attention(
    sess: TraceSession, layer: int, qkv: tuple[torch.Tensor, torch.Tensor, torch.Tensor], mask: torch.Tensor | None,
    scaling: float, kw: dict[str, Any],
) -> torch.Tensor:  # fmt: skip
    """Output [B,T,H,d_v] of eager attention with the scores and pattern made whole and hooked (module
    docstring); qkv = (query [B,H,T,d], key [B,H_kv,Tk,d], value [B,H_kv,Tk,d_v]). Records the layer's statistics
    (detached) and, under `grad=True`, keeps `differentiable_stats` of its pattern on the session."""
    q, k, v = qkv
    B, H, T, _ = q.shape
    Tk = k.shape[2]
    hooks = sess.attn_hooks.get(layer, {})
    raw = torch.matmul(q, _expand_kv(k, H).transpose(-1, -2)) * scaling  # [B,H,T,Tk]
    if kw.get("softcap") is not None:
        raw = torch.tanh(raw / kw["softcap"]) * kw["softcap"]
    vis = _visible(mask, T, Tk, kw.get("sliding_window"), q.device)
    s = raw.masked_fill(~vis, float("-inf"))
    if mask is not None and mask.dtype != torch.bool:  # an additive mask may carry finite biases where visible
        s = s + torch.where(vis, mask[..., :T, :Tk], torch.zeros((), dtype=mask.dtype, device=mask.device))
    fn = hooks.get("attn.hook_attn_scores")
    s = s if fn is None or (y := fn(s)) is None else y
    A, sink_mass = _softmax_rows(s, kw.get("s_aux"))
    fn = hooks.get("attn.hook_pattern")
    A = A if fn is None or (y := fn(A)) is None else y
    moves = sess.plan.sink.get(layer, [])
    if moves:
        A, sink_mass = A.clone(), None if sink_mass is None else sink_mass.clone()
        _move_to_sink(A, moves, 0, T, sink_mass)
    _record(sess, layer, A, sink_mass, raw, v)
    if sess.grad:
        sess.grad_stats.setdefault(layer, []).append(differentiable_stats(A))
    z = torch.matmul(A.to(v.dtype), _expand_kv(v, H))  # [B,H,T,d_v]
    return z.transpose(1, 2).contiguous()


def _record(sess: TraceSession, layer: int, A: torch.Tensor, sink_mass: torch.Tensor | None, raw: torch.Tensor,
            v: torch.Tensor) -> None:  # fmt: skip
    """Hand the layer's (edited) pattern, pre-mask logit statistics and value norms to the recorder, detached."""
    rec = sess.recorder
    if rec is None:
        return
    with torch.no_grad():
        rec.attention_path(layer, "eager")
        rec.attention_rows(layer, 0, A.detach().float())
        if sink_mass is not None:
            rec.learned_sink(layer, 0, sink_mass.detach().float())
        rec.logits(layer, *_logit_rows(raw.detach().float(), 0, raw.shape[-1] - raw.shape[-2]))
        vd = v.detach()
        rec.value_norms(layer, value_norms(vd, sess.value_factor(layer, vd.shape[1])))


def _same(a: Any, b: Any) -> bool:
    """Whether two activations are one tensor (the same storage and offset, whatever view of it)."""
    return torch.is_tensor(a) and torch.is_tensor(b) and a.data_ptr() == b.data_ptr() and a.numel() == b.numel()


def _mlp_entry(arch: Arch, layer: int) -> nn.Module:
    """The module the MLP's input enters: the MLP, or OPT's `fc1` where `arch.mlp` is the block's own `fc2`."""
    block, mlp = arch.blocks[layer], arch.mlp[layer]
    fc1 = getattr(block, "fc1", None)
    return fc1 if mlp is getattr(block, "fc2", None) and isinstance(fc1, nn.Module) else mlp


def resid_mid_sites(model: nn.Module, arch: Arch, device: torch.device) -> list[nn.Module] | str:
    """Per layer, the module whose first input is the residual stream after attention (`hook_resid_mid`), or a
    one-line reason why the family has none (parallel blocks), from one forward of two tokens on `device` (the
    model's input device) (module docstring)."""
    block = arch.blocks[0]
    norms = {name: c for name, c in block.named_children() if is_norm(c)}
    seen: dict[str, Any] = {}

    def grab(key: str, out: bool = False) -> Callable[..., None]:
        def fn(mod: nn.Module, args: tuple, *rest: Any) -> None:
            x = rest[-1] if out else (args[0] if args else rest[0].get("hidden_states"))
            seen.setdefault(key, x[0] if isinstance(x, tuple) else x)

        return fn

    entry = _mlp_entry(arch, 0)
    handles = [
        block.register_forward_pre_hook(grab("block"), with_kwargs=True),
        arch.attn[0].register_forward_pre_hook(grab("attn"), with_kwargs=True),
        entry.register_forward_pre_hook(grab("mlp"), with_kwargs=True),
    ]
    for name, n in norms.items():
        handles.append(n.register_forward_pre_hook(grab(name + ".in"), with_kwargs=True))
        handles.append(n.register_forward_hook(grab(name + ".out", out=True)))
    try:
        with torch.no_grad():
            model(input_ids=torch.zeros(1, 2, dtype=torch.long, device=device), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    if "mlp" not in seen:
        return f"{arch.model_type}: the MLP of block 0 did not run in a two-token forward, so resid_mid is not found"
    norm = next((n for n in norms if _same(seen.get(n + ".out"), seen.get("mlp"))), None)
    source = seen.get(norm + ".in") if norm is not None else seen.get("mlp")
    if _same(seen.get("mlp"), seen.get("attn")) or _same(source, seen.get("block")):
        return (
            f"{arch.model_type} has parallel blocks (attention and MLP both read the block's input), so there is no "
            "residual stream between them: hook_resid_pre + hook_attn_out + hook_mlp_out = hook_resid_post"
        )
    if norm is not None:
        return [getattr(b, norm) for b in arch.blocks]
    return [_mlp_entry(arch, l) for l in range(arch.n_layers)]
