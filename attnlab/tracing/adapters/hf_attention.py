"""The attention function of the trace adapter (`attnlab.tracing.adapters.hf`), registered with transformers'
`AttentionInterface` as "attnlab" (spec extreme-tokens §5, §10.2): `attention` runs a layer through the fused path
(`attnlab.tracing.fast.fused_layer`) where that is exact, else (`chunked_reason` says why) through the exact chunked
function here, `attnlab_attention`.

Eager math: s = q kᵀ·scaling, soft-capped as s ← c·tanh(s/c) when the layer passes `softcap`, then the mask (the
one transformers builds for the name "attnlab", registered as sdpa's boolean mask: padding, sliding windows,
chunks; or, when it builds none, the causal mask with the layer's `sliding_window`); fp32 softmax, with the layer's
learned sink logits `s_aux` as one extra column dropped after it. It runs in chunks of at most `CAUSAL_CHUNK`
queries (and `CHUNK_ELEMENTS` scores), each multiplied only against the keys its queries can see, so that no
[B,H,T,T] tensor is held and the masked future half is never computed. Each chunk of weights [B,H,C,K] goes to the
session's recorder (`attention_rows`; the learned-sink mass [B,H,C] to `learned_sink`); the pre-mask logit
statistics s_i0 and mean_{1≤j≤i−1} s_ij come from q and a running sum of k (O(T·d_h), `tracing.fast.logit_stats`;
from the capped score rows under a softcap), and the value norms ‖W_O^h v_{g(h),i}‖ (g(h) = h ÷ (H/H_kv)) from the
session's triangular factors of W_O^h (`value_factor`). `MoveToSink` interventions make a head's rows one-hot on
key 0 here.

Hand-written rather than sdpa because the statistics need every weight of every row; the chunking, scratch
buffers and grouped GEMMs keep it within a few tens of percent of sdpa's fused kernel (benchmarks/RESULTS.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from attnlab.errors import InputError
from attnlab.tracing.extras import needs_attention
from attnlab.tracing.fast import fused_layer, logit_stats, value_norms
from attnlab.tracing.interventions import MoveToSink

if TYPE_CHECKING:
    from attnlab.tracing.adapters.hf import TraceSession

ATTN_NAME = "attnlab"
CHUNK_ELEMENTS = 1 << 22  # at most ~4M fp32 scores (16 MiB) per query chunk
CAUSAL_CHUNK = 128  # queries per chunk at most: chunk k multiplies only against keys < its last query + 1
MASKED = -1e30  # finite "minus infinity": exp underflows to exactly 0 and 0 · MASKED = 0
STATS = ("fast", "full", "chunked")


def additive_causal_mask(q0: int, q1: int, tk: int, offset: int) -> torch.Tensor:
    """[q1−q0, tk] additive mask: 0 where key j ≤ query i + offset, MASKED after."""
    future = torch.ones(q1 - q0, tk, dtype=torch.bool).triu(q0 + offset + 1)
    return torch.zeros(q1 - q0, tk).masked_fill_(future, MASKED)


def _expand_kv(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[B,H_kv,T,d_h] -> [B,H,T,d_h]; query head h reads KV head h ÷ (H/H_kv) (as transformers' repeat_kv)."""
    groups = n_heads // x.shape[1]
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def _move_to_sink(
    w: torch.Tensor, moves: list[MoveToSink], q0: int, q1: int, sink_mass: torch.Tensor | None = None
) -> None:
    """In place on weights w [B,H,C,Tk]: the rows of each moved head (all, or those its `queries` mask selects)
    become one-hot on key 0; their learned-sink mass [B,H,C], if any, becomes 0."""
    every = [s.head for s in moves if s.queries is None]
    if every:
        w[:, every] = 0.0
        w[:, every, :, 0] = 1.0
        if sink_mass is not None:
            sink_mass[:, every] = 0.0
    for s in moves:
        if s.queries is None:
            continue
        rows = torch.as_tensor(s.queries, dtype=torch.bool)[:, q0:q1].unsqueeze(-1).to(w.device)  # [B,C,1]
        onehot = torch.zeros_like(w[:, s.head])
        onehot[..., 0] = 1.0
        w[:, s.head] = torch.where(rows, onehot, w[:, s.head])
        if sink_mass is not None:
            sink_mass[:, s.head] = sink_mass[:, s.head].masked_fill(rows.squeeze(-1), 0.0)


def _window_mask(q0: int, q1: int, tk: int, offset: int, window: int, device: torch.device) -> torch.Tensor:
    """[q1−q0, tk] bool, True where key j is visible to query i under a sliding window: i+offset−W < j ≤ i+offset."""
    i = torch.arange(q0, q1, device=device).unsqueeze(1) + offset
    j = torch.arange(tk, device=device).unsqueeze(0)
    return (j <= i) & (j > i - window)


def _logit_rows(s: torch.Tensor, q0: int, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """From pre-mask (soft-capped) scores s [B,H,C,Tk]: s_i0 [B,H,C] and (1/(i−1)) Σ_{j=1}^{i−1} s_ij [B,H,C]."""
    C, Tk = s.shape[-2:]
    i = torch.arange(q0, q0 + C, device=s.device).unsqueeze(1) + offset
    j = torch.arange(Tk, device=s.device).unsqueeze(0)
    keep = (j >= 1) & (j <= i - 1)
    rest = torch.where(keep, s, torch.zeros((), device=s.device)).sum(-1)
    return s[..., 0], rest / (i.squeeze(1) - 1).clamp_min(1).to(s.dtype)


@dataclass
class _Variant:
    """What one attention call asks for beyond eager softmax(q kᵀ·scaling + mask)."""

    scaling: float
    window: int | None  # keys i−W+1..i only
    softcap: float | None  # s = c·tanh(s/c) before the mask
    sinks: torch.Tensor | None  # [H] learned sink logits: one extra column in the softmax, dropped after


def _chunk_scores(
    qc: torch.Tensor, kt: torch.Tensor, var: _Variant, mask: torch.Tensor | None, causal: Callable[[], torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(raw, masked) scores [B·H,C,Tk]: raw = softcap(q kᵀ·scaling), masked = raw + mask (MASKED where hidden).

    mask: the [B,1|H,C,Tk] mask transformers built (bool: True = visible; float: additive), or None for the
    causal (and, under a window, sliding) mask built here."""
    raw = torch.bmm(qc, kt) * var.scaling
    if var.softcap is not None:
        raw = torch.tanh(raw / var.softcap) * var.softcap
    if mask is None:
        return raw, raw + causal()
    return raw, mask


def _plain_scores(sess: TraceSession | None, qc: torch.Tensor, kt: torch.Tensor, scaling: float, q0: int, q1: int,
                  offset: int) -> torch.Tensor:  # fmt: skip
    """The common case (no mask from transformers, no softcap, no window): scores [B·H_kv, G·C, Tk] (= [B,H,C,Tk]
    in memory) = q kᵀ·scaling with the future keys j > i + offset set to MASKED, written into the session's
    scratch buffer. qc [B·H_kv, G·C, d_h] holds the G query heads of each KV head; kt [B·H_kv, d_h, Tk]. Only the
    last Tk − q0 − offset columns can hold future keys: one strict upper triangle per head."""
    BHk, GC, _ = qc.shape
    C, Tk = q1 - q0, kt.shape[-1]
    s = sess.scratch("scores", (BHk, GC, Tk), qc.device) if sess is not None else qc.new_empty(BHk, GC, Tk)
    torch.bmm(qc, kt, out=s).mul_(scaling)
    width = Tk - q0 - offset
    if width > 1:  # an additive mask (0 or MASKED; MASKED + s rounds to MASKED) is cheaper than masked_fill_
        key = (-1, C, width, -1)
        tri = sess.masks.get(key) if sess is not None else None
        if tri is None:
            tri = additive_causal_mask(0, C, width, 0).to(qc.device)
            if sess is not None:
                sess.masks[key] = tri
        s.view(BHk, GC // C, C, Tk)[..., Tk - width :].add_(tri)
    return s


def _masked(raw: torch.Tensor, mask: torch.Tensor | Any, B: int, H: int) -> torch.Tensor:
    """raw [B·H,C,Tk] with transformers' mask [B,1|H,C,Tk] applied -> [B,H,C,Tk]."""
    s = raw.view(B, H, *raw.shape[1:])
    if mask.dim() == 2:
        return s + mask
    return s.masked_fill(~mask, MASKED) if mask.dtype == torch.bool else s + mask.clamp_min(MASKED)


def _softmax(
    s: torch.Tensor, sinks: torch.Tensor | None, out: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Weights [B,H,C,Tk] = softmax over keys (and the learned sink column, if any); the sink's mass [B,H,C].
    `out` (fp32, shaped like s) receives the weights when there is no sink column."""
    if sinks is None:
        if out is not None and s.dtype == torch.float32:
            return torch.softmax(s, dim=-1, out=out), None
        return torch.softmax(s, dim=-1, dtype=torch.float32), None
    sk = sinks.float().view(1, -1, 1).expand(*s.shape[:3])
    lse = torch.logaddexp(torch.logsumexp(s, dim=-1), sk)
    return torch.exp(s - lse.unsqueeze(-1)), torch.exp(sk - lse)


def _visible_keys(mask: torch.Tensor | None, q0: int, q1: int, offset: int, Tk: int) -> int:
    """How many leading keys queries q0..q1−1 may see: q1 + offset under causal attention (keys after the last
    query are never visible), or all Tk when transformers' mask [B,1|H,T,Tk] shows a later one (e.g. a
    bidirectional block)."""
    n = min(Tk, q1 + offset)
    if mask is None or n == Tk:
        return n
    later = mask[..., q0:q1, n:Tk]
    visible = later if later.dtype == torch.bool else later > MASKED / 2
    return Tk if bool(visible.any()) else n


def attnlab_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    sliding_window: int | None = None,
    softcap: float | None = None,
    s_aux: torch.Tensor | None = None,
    attnlab_session: TraceSession | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Eager attention in query chunks. query/key [B,H|H_kv,T|Tk,d_h], value [B,H_kv,Tk,d_v] -> output [B,T,H,d_v]
    (d_v ≠ d_h: multi-head latent attention).

    Every variant transformers passes: its mask (padding, sliding windows, chunks), `scaling`, `softcap`
    (s ← c·tanh(s/c)), `sliding_window` and learned sink logits `s_aux` [H] (gpt-oss)."""
    sess = attnlab_session
    B, H, T, D = query.shape
    Tk = key.shape[2]
    var = _Variant(D**-0.5 if scaling is None else float(scaling), sliding_window, softcap, s_aux)
    layer = sess.layer_of(module) if sess is not None else int(getattr(module, "layer_idx", -1))
    rec = sess.recorder if sess is not None else None
    moves = sess.plan.sink.get(layer, []) if sess is not None else []
    if sess is not None:
        sess.layers_seen.add(layer)
    if rec is not None and Tk != T:
        raise InputError("tracing needs one full forward pass without a KV cache (use_cache=False)")
    plain = attention_mask is None and softcap is None and (sliding_window is None or sliding_window >= Tk)
    keys, values = (key, value) if plain else (_expand_kv(key, H), _expand_kv(value, H))
    Hk = keys.shape[1]  # the plain case keeps KV heads grouped: G = H/H_kv query heads per GEMM batch
    G = H // Hk
    chunk = max(1, min(T, CAUSAL_CHUNK, (sess.chunk_elements if sess else CHUNK_ELEMENTS) // max(1, B * H * Tk)))
    Dv = value.shape[-1]
    out = torch.empty(B, H, T, Dv, dtype=value.dtype, device=value.device)
    stats = torch.empty(2, B, H, T, device=query.device) if (rec is not None and softcap is not None) else None
    qf = query.float().view(B, Hk, G, T, D)
    kt = keys.float().reshape(B * Hk, Tk, D).transpose(1, 2)
    vs = values.reshape(B * Hk, Tk, Dv)
    for q0 in range(0, T, chunk):
        q1 = min(T, q0 + chunk)
        nk = _visible_keys(attention_mask, q0, q1, Tk - T, Tk)
        qc = qf[:, :, :, q0:q1].reshape(B * Hk, G * (q1 - q0), D)
        w = _attend_chunk(sess, layer, qc, kt[:, :, :nk], var, attention_mask, (B, H, q0, q1, Tk - T), moves, stats)
        av = torch.matmul(w.view(B * Hk, G * (q1 - q0), nk).to(vs.dtype), vs[:, :nk])
        out[:, :, q0:q1] = av.view(B, H, q1 - q0, Dv)
    if rec is not None and sess is not None:
        rec.logits(layer, *(stats if stats is not None else logit_stats(query, key, var.scaling)))
        rec.value_norms(layer, value_norms(value, sess.value_factor(layer, value.shape[1])))
    return out.transpose(1, 2).contiguous(), None


def chunked_reason(sess: TraceSession, layer: int, attention_mask: Any, T: int, Tk: int, kw: dict) -> str | None:
    """Why layer `layer` must take the exact chunked path (None: the fused kernel computes it exactly)."""
    rec = sess.recorder
    if rec is None or sess.stats == "chunked":
        return "stats=chunked" if rec is not None else "no recorder"
    if Tk != T:
        return "KV cache"
    if kw.get("softcap") is not None:
        return "soft-capping"
    window = kw.get("sliding_window")
    if attention_mask is None and window is not None and window < Tk:
        return "sliding window without a mask"
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        return "additive mask"
    if sess.plan.sink.get(layer):
        return "MoveToSink"
    if any(l == layer for l, _ in rec.keep):
        return "kept pattern"
    if any(e.key_set(layer) is None for e in rec.extras.values() if needs_attention(e)):
        return "extra statistic needs whole rows"
    return None


def attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    attnlab_session: TraceSession | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The function registered as "attnlab": fused where exact (module docstring), else the chunked one."""
    sess = attnlab_session
    T, Tk = query.shape[2], key.shape[2]
    if sess is None:
        return attnlab_attention(module, query, key, value, attention_mask, scaling, dropout, **kwargs)
    layer = sess.layer_of(module)
    if layer in sess.attn_hooks:  # TransformerLens's hook_q/k/v (`adapters.hooked`)
        query, key, value = sess.qkv_hooks(layer, (query, key, value))
    if sess.wants_pattern(layer):  # hook_attn_scores / hook_pattern, or grad=True: the whole pattern, hooked
        scale = query.shape[-1] ** -0.5 if scaling is None else float(scaling)
        return sess.hooked_attention(layer, (query, key, value), attention_mask, scale, kwargs), None
    reason = chunked_reason(sess, layer, attention_mask, T, Tk, kwargs)
    if reason is not None:
        if sess.recorder is not None:
            sess.recorder.attention_path(layer, "eager")  # the exact chunked function (the fused one notes its own)
        return attnlab_attention(module, query, key, value, attention_mask, scaling, dropout,
                                 attnlab_session=sess, **kwargs)  # fmt: skip
    sess.layers_seen.add(layer)
    scale = query.shape[-1] ** -0.5 if scaling is None else float(scaling)
    return fused_layer(sess, layer, query, key, value, attention_mask, scale, kwargs.get("s_aux")), None


def value_factor(w_heads: torch.Tensor, n_kv: int) -> torch.Tensor:
    """[H_kv, d_h, G·d_h] fp32: R_hᵀ of the G = H/H_kv query heads h of each KV head side by side (column block r of
    KV head g is R_{g·G+r}ᵀ), where R_h [d_h, d_h] is upper triangular with R_hᵀR_h = W_O^hᵀW_O^h for w_heads
    [H, d, d_h] = W_O^h (`Arch.w_o_heads`), so that ‖W_O^h v‖ = ‖R_h v‖ for every v: a sum of squares, with no
    cancellation (unlike the Gram form vᵀ W_O^hᵀW_O^h v). `_triangular_factors` finds R_h."""
    H, d, D = w_heads.shape
    rt = _triangular_factors(w_heads.double()).transpose(1, 2).float()  # [H, D, D] = R_hᵀ
    return rt.reshape(n_kv, H // n_kv, D, D).permute(0, 2, 1, 3).reshape(n_kv, D, H // n_kv * D)


def _triangular_factors(w: torch.Tensor) -> torch.Tensor:
    """[H, d_h, d_h] float64 upper-triangular R_h with R_hᵀR_h = W_hᵀW_h, w [H, d, d_h] float64: the Cholesky factor
    of the Gram matrix where W_h is well conditioned (2.3× faster than a QR factorisation: 2.0 against 4.6 ms a
    SmolLM2 layer), else the R of W_h = Q_h R_h (a rank-deficient or ill-conditioned head, or d < d_h: zero rows
    padded)."""
    H, d, D = w.shape
    L, info = torch.linalg.cholesky_ex(w.transpose(1, 2) @ w)
    diag = torch.diagonal(L, dim1=-2, dim2=-1)
    good = (info == 0) & (diag.amin(-1) > 1e-4 * diag.amax(-1))  # κ(W_h) < 1e4: Cholesky's R is accurate
    r = L.transpose(1, 2).contiguous()
    bad = (~good).nonzero().squeeze(-1)
    if bad.numel():
        qr = torch.linalg.qr(w[bad], mode="r").R  # [n, min(d, D), D]
        r[bad] = torch.cat([qr, qr.new_zeros(bad.numel(), D - qr.shape[1], D)], dim=1) if qr.shape[1] < D else qr
    return r


def _attend_chunk(
    sess: TraceSession | None,
    layer: int,
    qc: torch.Tensor,
    kt: torch.Tensor,
    var: _Variant,
    attention_mask: torch.Tensor | None,
    span: tuple[int, int, int, int, int],
    moves: list[MoveToSink],
    stats: torch.Tensor | None,
) -> torch.Tensor:
    """Weights [B,H,C,Tk] of queries q0..q1−1 (span = (B, H, q0, q1, Tk−T)), recorded into the session's recorder.

    qc [B·H,C,d_h] fp32 queries, kt [B·H,d_h,Tk] fp32 keys; stats [2,B,H,T] receives the pre-mask logit
    statistics when soft-capping makes the running-sum formula of `logit_stats` inapplicable."""
    b, n_heads, q0, q1, offset = span
    Tk = kt.shape[-1]
    rec = sess.recorder if sess is not None else None

    def causal() -> torch.Tensor:
        m = sess.causal_mask(q0, q1, Tk, offset) if sess is not None else additive_causal_mask(q0, q1, Tk, offset)
        m = m.to(qc.device)
        if var.window is not None and var.window < Tk:
            m = m.masked_fill(~_window_mask(q0, q1, Tk, offset, var.window, qc.device), MASKED)
        return m

    mask = None if attention_mask is None else attention_mask[:, :, q0:q1, :Tk]
    if mask is None and var.softcap is None and (var.window is None or var.window >= Tk):
        raw = masked = _plain_scores(sess, qc, kt, var.scaling, q0, q1, offset)
    else:
        raw, masked = _chunk_scores(qc, kt, var, mask, causal)
    s = masked.view(b, n_heads, q1 - q0, Tk) if mask is None else _masked(raw, mask, b, n_heads)
    if stats is not None:
        s0, rest = _logit_rows(raw.view(b, n_heads, q1 - q0, Tk), q0, offset)
        stats[0, :, :, q0:q1], stats[1, :, :, q0:q1] = s0, rest
    w, sink_mass = _softmax(s, var.sinks, None if sess is None else sess.scratch("weights", s.shape, s.device))
    if moves:
        _move_to_sink(w, moves, q0, q1, sink_mass)
    if rec is not None:
        rec.attention_rows(layer, q0, w, scores=None if (moves or sink_mass is not None) else s)
        if sink_mass is not None:
            rec.learned_sink(layer, q0, sink_mass)
    return w


def register_attention() -> None:
    """Register "attnlab" with transformers' AttentionInterface (idempotent; the function holds no state)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTN_NAME, attention)
    # transformers builds no mask for an attention name it does not know; sdpa's boolean mask (True = visible)
    # carries padding, sliding windows and chunks (None when plain causal attention needs none)
    AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)


def check_stats(stats: str) -> str:
    """`stats` one of STATS, else a one-line InputError."""
    if stats not in STATS:
        raise InputError(f"stats must be one of {', '.join(STATS)}, got {stats!r}")
    return stats
