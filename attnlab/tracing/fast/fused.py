"""The fused attention path of the trace adapter (issue 23): attention statistics at the cost of a plain forward.

The attention registered as "attnlab" (`attnlab.tracing.adapters.hf_attention.attention`) runs each layer it can
through `fused_layer`: torch's fused kernel, which returns the
output O and each row's log-sum-exp lse_i = log Σ_j exp(s_ij) beside it (CPU:
`aten._scaled_dot_product_flash_attention_for_cpu`; CUDA: the kernel sdpa would choose, cuDNN's, flash-attention's
or the memory-efficient one). Every statistic
that needs only a few keys per row follows exactly, with no [T,T] block:

    A_i0 = exp(s·q_i·k_0 − lse_i)                 (0 where a window hides key 0): the sink score and ᾱ_0
    Σ_i A_ij for a small key set J               O(T·|J|·d_h): the authors' sink procedure (`ExtraStatistic.key_set`)
    s_i0 and mean_{1≤j≤i−1} s_ij                 from q and a running sum of k (`logit_stats`)
    learned sinks (gpt-oss): lse'_i = logaddexp(lse_i, sink_h), O ← O·exp(lse_i − lse'_i), mass exp(sink_h − lse'_i)

With `stats="full"` the full-row statistics come exactly: the column sums Σ_i A_ij of every key and the sum over
rows of the normalised row entropies H_i / log(i+1). On the cpu (numba installed), for plain causal attention, they
come from the forward's own attention computed by query blocks (`full_rows_attention`: torch's GEMMs and one numba
pass over each block's rows), at about the fused kernel's cost. Elsewhere (a boolean mask, a learned sink, CUDA)
one more fused call, with queries and keys swapped, gives them (`swapped_statistics`): c_j = exp of its
log-sum-exp and, from its output with the queries as values, the entropies. On CUDA that call runs through
PyTorch's compiled FlexAttention where it applies (`flex.flex_statistics`: the bias as a score_mod, the model's
dtype, a causal block mask; issue 41), noted "+flex" in `Trace.attention_paths`.

A layer the kernel cannot do exactly runs through the exact chunked function (`hf_attention.attnlab_attention`,
chosen by `hf_attention.chunked_reason`):
soft-capping, a sliding window transformers did not turn into a mask, a float (additive) mask, `MoveToSink`
interventions, heads whose full patterns are kept, extras that need whole rows, `stats="chunked"`. The recorder
notes the path each layer took (`Trace.attention_paths`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from attnlab.tracing.extras import needs_attention
from attnlab.tracing.fast import cpu_kernels, flex
from attnlab.tracing.fast.statistics import logit_stats, value_norms

if TYPE_CHECKING:
    from attnlab.tracing.adapters.hf import TraceSession


def fused_kernel(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float,
    causal: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(O, lse) of `named_kernel` (without the kernel's name)."""
    out, lse, _ = named_kernel(q, k, v, mask, scale, causal)
    return out, lse


def named_kernel(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float,
    causal: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor, str]:  # fmt: skip
    """(O [B,H,T,d_v], lse [B,H,T] fp32, the kernel that ran: "flash", "cudnn" or "efficient") of
    softmax(q kᵀ·scale + mask) v, with the additive mask [B|1,1|H,T,Tk]
    in q's dtype or None, and causal (the mask on top, cpu only) when `causal`, by default when `mask` is None.
    q [B,H,T,d]; k, v [B,H_kv,T,d] with H_kv dividing H: query head h reads KV head h ÷ (H/H_kv) (the CPU kernel
    indexes grouped heads itself, as sdpa's enable_gqa does). Value heads of another size d_v (multi-head latent
    attention: DeepSeek-V2/V3, Kimi-K2) are padded with zeros to the kernels' one head size (`_same_head_size`)."""
    if v.shape[-1] != q.shape[-1]:
        return _same_head_size(q, k, v, mask, scale, causal)
    if q.device.type == "cuda":  # pragma: no cover - CUDA: tests/gpu (run on an H200, 2026-12-04)
        k, v = _expand(k, q.shape[1]), _expand(v, q.shape[1])
        if mask is None and q.dtype in (torch.float16, torch.bfloat16) and q.shape[-1] <= 256:
            return _cuda_causal(q, k, v, scale)
        bias = None if mask is None else _aligned_bias(mask.expand(q.shape[0], q.shape[1], -1, -1))
        out = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, bias, True, 0.0, mask is None,
                                                                     scale=scale)  # fmt: skip
        return out[0], out[1][..., : q.shape[2]].float(), "efficient"
    causal = mask is None if causal is None else causal
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, causal, attn_mask=mask, scale=scale
    )
    return out, lse.float(), "flash"  # the CPU's flash-attention kernel


def _same_head_size(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float, causal: bool | None
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """`named_kernel` for value heads d_v ≠ d_qk: the fused kernels take one head size, so the narrower side is
    padded with zero coordinates, which change nothing: zero value coordinates give zero output coordinates (cut
    off after), and zero query/key coordinates add 0 to every score q·k (the scale is passed, not derived from the
    width). (O [B,H,T,d_v], lse [B,H,T], the kernel's name)."""
    dq, dv = q.shape[-1], v.shape[-1]
    if dv < dq:
        out, lse, name = named_kernel(q, k, torch.nn.functional.pad(v, (0, dq - dv)), mask, scale, causal)
        return out[..., :dv], lse, name
    pad = (0, dv - dq)
    return named_kernel(torch.nn.functional.pad(q, pad), torch.nn.functional.pad(k, pad), v, mask, scale, causal)


def _cuda_causal(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor, str]:  # pragma: no cover - CUDA: tests/gpu
    """(O, lse [B,H,T] fp32, kernel name) of causal half-precision attention on CUDA through the kernel sdpa itself
    would choose for these tensors (`torch._fused_sdp_choice`): cuDNN's where sdpa takes it (on Hopper it outruns
    flash-attention 2), else flash-attention's, else the memory-efficient kernel's; each returns the log-sum-exp."""
    from torch.nn.attention import SDPBackend

    choice = torch._fused_sdp_choice(q, k, v, None, 0.0, True, scale=scale)
    B, H, T = q.shape[:3]
    if choice == SDPBackend.CUDNN_ATTENTION.value:
        try:
            out = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, True, False,
                                                                     scale=scale)  # fmt: skip
            return out[0], out[1].reshape(B, H, T).float(), "cudnn"  # cuDNN's log-sum-exp is [B,H,T,1]
        except RuntimeError:  # a cuDNN build without this graph: flash-attention's kernel computes the same
            choice = SDPBackend.FLASH_ATTENTION.value
    if choice == SDPBackend.FLASH_ATTENTION.value:
        out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, False, scale=scale)
        return out[0], out[1][..., :T].float(), "flash"
    out = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, True, scale=scale)
    return out[0], out[1][..., :T].float(), "efficient"


def _aligned_bias(mask: torch.Tensor) -> torch.Tensor:
    """The additive mask [B,H,T,Tk] as the memory-efficient CUDA kernel takes it: rows contiguous and their stride
    a multiple of 16 elements (padded and sliced back, as sdpa does before calling that kernel)."""
    pad = -mask.shape[-1] % 16
    padded = torch.zeros(*mask.shape[:-1], mask.shape[-1] + pad, dtype=mask.dtype, device=mask.device)
    padded[..., : mask.shape[-1]] = mask
    return padded[..., : mask.shape[-1]]


def swapped_statistics(
    q: torch.Tensor, k: torch.Tensor, lses: tuple[torch.Tensor, torch.Tensor], bool_mask: torch.Tensor | None,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """`stats="full"` in one more fused call (issue 23): (col_sum [B,H,Tk] c_j = Σ_i A_ij, entropy_sum [B,H]
    Σ_{i≥1} H_i / log(i+1)), exactly, with A_ij = exp(s·q_i·k_j − lse_i) the weights of the forward that gave
    lse (with a learned sink folded in: the keys' share of each row) and H_i = −Σ_j P_ij log P_ij the entropy of
    the key distribution P_ij = exp(s·q_i·k_j − lse_keys_i) (renormalised without the sink). lses = (lse, lse_keys),
    both [B,H,T] (the same tensor without a sink).

    The roles of queries and keys are swapped: "queries" k_j against "keys" s·q_i, with the bias −lse_i added to
    every score of key i, give the log-sum-exp lse′_j = log Σ_i A_ij = log c_j; with the "values"
    u_i = w_i·r_i·s·q_i, w_i = 1/log(i+1) (w_0 = 0), r_i = exp(lse_i − lse_keys_i), the output is
    O′_j = Σ_i (A_ij / c_j) u_i, and since r_i·A_ij = P_ij and Σ_j P_ij = 1 on a row with keys (spec extreme-tokens
    §5, row entropy H_i = lse_keys_i − Σ_j P_ij s_ij):

        Σ_{i≥1} H_i / log(i+1) = Σ_{i seeing a key} w_i·lse_keys_i − Σ_j c_j k_j·O′_j.

    On the cpu the bias goes in as a mask broadcast over the swapped queries (stride 0, no [T,T] block), which keeps
    every head size at d_h (65 would leave the kernel's vector width: 1.3x the forward's attention call, against
    1.05x); the CUDA kernels take it as one more coordinate of queries and keys instead (`_swapped_inputs`). Both
    sequences are reversed in time, so that the causal "i ≥ j" is the kernel's causal "i′ ≤ j′"; a boolean mask
    [B|1,1|H,T,Tk] is flipped and transposed likewise. Keys no query sees get c_j = 0 (the CPU kernel returns lse
    0, not −inf, for a fully masked row); a query row the mask hides entirely is a key the swapped mask hides, so it
    adds nothing (H_i = 0, as a row with no keys has).
    q [B,H,T,d], k [B,H_kv,Tk,d] (query head h reads KV head h ÷ (H/H_kv)); fp32 whatever the model's dtype."""
    lse, lse_keys = lses
    B, H, T, D = q.shape
    i = torch.arange(T, device=q.device, dtype=torch.float32)
    w = torch.where(i > 0, 1.0 / torch.log1p(i.clamp_min(1.0)), torch.zeros((), device=q.device))  # [T]
    seen = torch.ones(1, 1, T, dtype=torch.bool, device=q.device) if bool_mask is None else bool_mask.any(-1)
    bias = torch.where(seen, -lse, torch.zeros((), device=q.device))  # [B,H,T]; 0 on a row that sees nothing
    weight = (torch.exp(lse - lse_keys) * w).flip(2).unsqueeze(-1)  # [B,H,T,1] w_i·r_i (flipped)
    queries, keys, mask = _swapped_inputs(q, _expand(k, H), bias, bool_mask, scale)
    values = keys[..., :D] * weight
    if values.shape[-1] < keys.shape[-1]:
        values = torch.nn.functional.pad(values, (0, keys.shape[-1] - D))
    out, lse_t = fused_kernel(queries, keys, values, mask, 1.0, causal=bool_mask is None)
    cols = lse_t.exp()  # [B,H,Tk] flipped
    if bool_mask is not None:
        cols = torch.where(bool_mask.any(-2).expand(B, H, -1).flip(-1), cols, torch.zeros((), device=q.device))
    dots = (queries[..., :D] * out[..., :D].float()).sum(-1).double()  # k_j·O′_j; undefined where no query sees j
    terms = torch.where(cols > 0, cols.double() * dots, torch.zeros((), dtype=torch.float64, device=q.device))
    rows = torch.where(seen, w * lse_keys, torch.zeros((), device=q.device)).double()
    return cols.flip(2), rows.sum(-1) - terms.sum(-1)


FULL_BLOCK = 3 << 19  # score entries per query block of `full_rows_attention` (6 MiB fp32: 128 rows of 3 heads at
#                       T = 4096, where 64 and 128 rows measured alike and 32 1.1× slower on the AMD EPYC VM)


def full_rows_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`stats="full"` on the cpu, for plain causal attention (no mask, no learned sink), in the forward's own
    attention (issue 23): (O [B,T,H,d_v] in q's dtype, lse [B,H,T] fp32, col_sum [B,H,T] float64 Σ_i A_ij, entropy
    [B,H] float64 Σ_{i≥1} H_i / log(i+1)). By blocks of queries and, per KV head, its G query heads: the scores
    by one GEMM over the visible keys, each row's softmax and statistics in one call (`cpu_kernels.softmax_rows`),
    then A·V by a second GEMM. Against the fused kernel plus the swapped call: one attention a layer instead of two.
    q [B,H,T,D], k [B,H_kv,T,D], v [B,H_kv,T,d_v] in transformers' layout (transposed [B,T,heads,D] views)."""
    B, H, T, D = q.shape
    Hkv, Dv = k.shape[1], v.shape[-1]
    G = H // Hkv
    qs = (q.detach().float() * scale).transpose(1, 2).reshape(B, T, Hkv, G, D).permute(0, 2, 1, 3, 4).contiguous()
    kt, vt = k.detach().float().transpose(1, 2), v.detach().float().transpose(1, 2)  # [B,T,H_kv,D]
    out = torch.empty(B, T, Hkv, G, Dv)
    col = torch.zeros(B, H, T, dtype=torch.float64)
    ent = torch.zeros(B, H, dtype=torch.float64)
    lse = torch.empty(B, H, T)
    rows = max(1, min(128, FULL_BLOCK // (G * T)))
    ld = T + 16  # the score rows' stride: not a multiple of 4 KiB, whose cache-set aliasing slows the GEMM (1.2×)
    scores, block_out = torch.empty(rows * G * ld), torch.empty(rows * G * Dv)
    inv_z, part = torch.empty(rows * G), np.empty((G, T), dtype=np.float32)
    for b in range(B):
        stats = (col[b].numpy(), ent[b].numpy(), lse[b].numpy())
        for q0 in range(0, T, rows):
            q1 = min(T, q0 + rows)
            n = (q1 - q0) * G
            for g in range(Hkv):
                s = scores.as_strided((n, q1), (ld, 1))
                torch.mm(qs[b, g, q0:q1].view(n, D), kt[b, :q1, g].T, out=s)
                cpu_kernels.softmax_rows(s.numpy(), q0, G, g, stats, inv_z[:n].numpy(), part)
                o = torch.mm(s, vt[b, :q1, g], out=block_out[: n * Dv].view(n, Dv))  # Σ_j exp(s_ij − m_i) v_j
                torch.mul(o.view(-1, G, Dv), inv_z[:n].view(-1, G, 1), out=out[b, q0:q1, g])
    return out.view(B, T, H, Dv).to(q.dtype), lse, col, ent


def _swapped_inputs(
    q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor, bool_mask: torch.Tensor | None, scale: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The swapped call's (queries [B,H,Tk,w], keys [B,H,T,w], additive mask or None), all reversed in time, fp32,
    with the per-key bias [B,H,T] (`swapped_statistics`) carried by the mask on the cpu (w = d_h) or by one more
    coordinate on CUDA (w = d_h + 1 rounded up to the kernels' multiple of 8). q [B,H,T,d], k [B,H,Tk,d]."""
    D = q.shape[-1]
    if q.device.type == "cpu":
        queries = k.float().flip(2)
        keys = q.float().flip(2) * scale
        rows = bias.flip(2).contiguous().unsqueeze(2)  # [B,H,1,T], rows contiguous: the bias of each swapped key
        if bool_mask is not None:
            hidden = (~bool_mask).flip(-1, -2).transpose(-1, -2)
            rows = rows.masked_fill(hidden, float("-inf"))
        return queries, keys, rows.expand(*keys.shape[:2], queries.shape[2], -1)
    width = -(-(D + 1) // 8) * 8  # pragma: no cover - CUDA: tests/gpu (run on an H200, 2026-12-04)
    queries = torch.zeros(*k.shape[:3], width, device=q.device)
    queries[..., :D] = k.flip(2)
    queries[..., D] = 1.0
    keys = torch.zeros(*q.shape[:3], width, device=q.device)
    keys[..., :D] = q.flip(2)
    keys[..., :D] *= scale
    keys[..., D] = bias.flip(2)
    mask = None
    if bool_mask is not None:
        mask = torch.zeros(bool_mask.shape, device=q.device).masked_fill_(~bool_mask, float("-inf"))
        mask = mask.flip(-1, -2).transpose(-1, -2)
    return queries, keys, mask


def key_columns(
    q: torch.Tensor, k: torch.Tensor, lse: torch.Tensor, keys: torch.Tensor, visible: torch.Tensor | None,
    scale: float,
) -> torch.Tensor:  # fmt: skip
    """[B,H,T,|J|] A_ij = exp(s·q_i·k_j − lse_i) for the keys j in `keys` [|J|] (0 where j > i or hidden), fp32.
    q [B,H,T,d], k [B,H_kv,Tk,d] (query head h reads KV head h ÷ (H/H_kv)); visible [B|1,1,T,|J|] bool or None
    (causal)."""
    B, H, T, D = q.shape
    Hkv = k.shape[1]
    qg = q.float().view(B, Hkv, H // Hkv, T, D)
    s = torch.matmul(qg, k[:, :, None, keys].float().transpose(-1, -2)).reshape(B, H, T, -1) * scale
    a = torch.exp(s - lse.unsqueeze(-1))
    causal = keys.view(1, -1) <= torch.arange(T, device=q.device).view(-1, 1)
    keep = causal if visible is None else causal & visible
    return torch.where(keep, a, torch.zeros((), device=a.device))


def _expand(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    groups = n_heads // x.shape[1]
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def fused_layer(sess: TraceSession, layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 bool_mask: torch.Tensor | None, scale: float, sinks: torch.Tensor | None) -> torch.Tensor:  # fmt: skip
    """Output [B,T,H,d_h] of one layer through the fused kernel, its statistics recorded (module docstring) and
    the kernel that computed the output noted (`TraceRecorder.attention_path`: "blocked" for
    `full_rows_attention`, else `named_kernel`'s name)."""
    rec = sess.recorder
    assert rec is not None
    B, H, T, _ = query.shape
    add = None
    if bool_mask is not None:  # the kernel takes an additive mask in q's dtype
        add = torch.zeros(bool_mask.shape, dtype=query.dtype, device=query.device)
        add.masked_fill_(~bool_mask, float("-inf"))
    entropy = cols = None
    if sess.stats == "full" and _full_rows_apply(query, bool_mask, sinks):
        out, lse, cols, entropy = full_rows_attention(query, key, value, scale)
        out, kernel = out.transpose(1, 2), "blocked"  # [B,H,T,d_v], as the fused kernel returns it
    else:
        out, lse, kernel = named_kernel(query, key, value, add, scale)
    rec.attention_path(layer, kernel)
    lse_keys = lse
    mass = None
    if sinks is not None:  # fold the learned sink logit into the softmax: one more term in the normaliser
        sk = sinks.float().view(1, H, 1)
        lse = torch.logaddexp(lse_keys, sk)
        out = out * torch.exp(lse_keys - lse).unsqueeze(-1).to(out.dtype)
        mass = torch.exp(sk - lse)
    s0, rest = logit_stats(query, key, scale)
    vis0 = None if bool_mask is None else bool_mask[..., :T, :1].expand(-1, H, -1, -1)[..., 0]  # [B|1,H,T]
    key0 = torch.exp(s0 - lse)
    if vis0 is not None:
        key0 = torch.where(vis0, key0, torch.zeros((), device=key0.device))
    if sess.stats == "full" and cols is None:
        cols, entropy = _second_call(sess, layer, (query, key, lse, lse_keys), bool_mask, scale)
    rec.fused_rows(layer, key0, entropy_sum=entropy, col_sum=cols)
    if mass is not None:
        rec.learned_sink(layer, 0, mass)
    _record_key_sets(rec, layer, (query, key, lse, bool_mask, cols), scale)
    rec.logits(layer, s0, rest)
    rec.value_norms(layer, value_norms(value, sess.value_factor(layer, value.shape[1])))
    return out.transpose(1, 2).contiguous()


def _second_call(
    sess: TraceSession, layer: int, tensors: tuple[torch.Tensor, ...], bool_mask: torch.Tensor | None, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`stats="full"` as one more attention call (col_sum [B,H,Tk], entropy_sum [B,H]): on CUDA through the compiled
    FlexAttention call where it applies (`flex.flex_statistics`, noted "flex" beside the output's kernel in
    `Trace.attention_paths`), else the swapped fused call (`swapped_statistics`). tensors: q, k, lse, lse_keys."""
    query, key, lse, lse_keys = tensors
    if flex.flex_applies(query, key, bool_mask):  # pragma: no cover - CUDA: benchmarks/gpu_check.sh
        sess.recorder.attention_path(layer, "flex")  # type: ignore[union-attr]
        return flex.flex_statistics(query, key, (lse, lse_keys), bool_mask, scale, sess.flex_calls())
    return swapped_statistics(query, key, (lse, lse_keys), bool_mask, scale)


def _full_rows_apply(query: torch.Tensor, bool_mask: torch.Tensor | None, sinks: torch.Tensor | None) -> bool:
    """Whether `stats="full"` runs in the forward's attention (`full_rows_attention`: plain causal rows on the cpu,
    numba installed) rather than as the swapped second call."""
    return bool_mask is None and sinks is None and query.device.type == "cpu" and cpu_kernels.AVAILABLE


def _record_key_sets(rec: Any, layer: int, tensors: tuple, scale: float) -> None:
    """Column sums Σ_i A_ij on the key set each extra asks for (`ExtraStatistic.key_set`). tensors: q [B,H,T,d],
    k [B,H_kv,T,d], lse [B,H,T], the boolean mask or None, and every column sum [B,H,T] when `stats="full"` (else
    None)."""
    q, k, lse, bool_mask, cols = tensors
    for extra in rec.extras.values():
        if not needs_attention(extra):
            continue
        keys = extra.key_set(layer).to(q.device)
        if keys.numel() == 0:
            continue
        if cols is not None:
            extra.attention_columns(layer, keys.cpu(), cols[..., keys])
            continue
        vis = None if bool_mask is None else bool_mask[..., :, keys]
        extra.attention_columns(layer, keys.cpu(), key_columns(q, k, lse, keys, vis, scale).sum(2))
