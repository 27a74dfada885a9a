"""The O(T·d_h) statistics of a traced attention layer, on both attention paths (the fused one, `fused.fused_layer`,
and the exact chunked one, `attnlab.tracing.adapters.hf_attention`): the pre-mask logit statistics s_i0 and
mean_{1≤j≤i−1} s_ij from q and a running sum of k (`logit_stats`), and the value norms ‖W_O^h v_{g(h),i}‖ from the
session's triangular factors (`value_norms`). On the cpu with numba each takes one fused pass (`cpu_kernels`);
elsewhere torch operations in blocks whose temporaries stay in cache.
"""

from __future__ import annotations

import torch

from attnlab.core.device import rows_per_block
from attnlab.tracing.fast import cpu_kernels

STAT_ROWS = 512  # tokens per block of the value norms: each block's temporaries stay in cache (256 measured
#                 1.04-1.14x slower at T = 512 and 4096 on the AMD EPYC VM, 2026-12-02)
LOGIT_ROWS = 512  # query rows per block of the logit statistics (512 and 1024 measured alike, 256 1.1× slower)


def logit_stats(query: torch.Tensor, key: torch.Tensor, scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """s0 [B,H,T] = s_i0 and rest [B,H,T] = (1/(i−1)) Σ_{j=1}^{i−1} s_ij = q_i·(Σ_{j=1}^{i−1} k_j)·scaling/(i−1),
    via running sums of keys (fp32; rest = 0 at i < 2). Spec extreme-tokens §5.

    Computed in the layout the projections write, q [B,T,H,d_h] and k [B,T,H_kv,d_h] (the [B,H,T,d_h] arguments
    are their transposed views, so no copy): query head h = g·(H/H_kv) + r reads KV head g, and every product is
    a broadcast over contiguous rows with a sum over d_h (1.4× faster than batched GEMVs over the strided [B,H,T,d_h]
    views: 0.59 against 0.87 ms a SmolLM2 layer at T = 512, 5.8 against 8.7 ms at 4096). The running sums and their
    row products go in blocks of LOGIT_ROWS queries (more on an accelerator: `rows_per_block`), carried from block to
    block, whose temporaries stay in cache. On the cpu with numba installed, one fused sweep over the rows instead
    (`cpu_kernels.logit_stats`: 7 against 22 ms a T = 512 SmolLM2 window inside a scan; its docstring says why)."""
    if query.device.type == "cpu" and cpu_kernels.AVAILABLE:
        rows = cpu_kernels.logit_stats(query.detach().float().transpose(1, 2).numpy(),
                                       key.detach().float().transpose(1, 2).numpy(), scaling)  # fmt: skip
        stats = torch.from_numpy(rows).transpose(2, 3)  # [2,B,H,T]
        return stats[0], stats[1]
    return logit_stats_blocked(query, key, scaling)


def logit_stats_blocked(query: torch.Tensor, key: torch.Tensor, scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """`logit_stats` by torch operations on any device (the running sums in blocks)."""
    B, H, T, D = query.shape
    Hkv = key.shape[1]
    q = query.float().transpose(1, 2).reshape(B, T, Hkv, H // Hkv, D)
    k = key.float().transpose(1, 2)  # [B,T,H_kv,D]
    out = torch.zeros(2, B, T, Hkv, H // Hkv, dtype=torch.float32, device=q.device)  # s_i0; the mean
    torch.sum(q * k[:, :1, :, None, :], -1, out=out[0])
    carry = None
    step = rows_per_block(LOGIT_ROWS, q.device, H * D)
    for a in range(2, T, step):  # rows i in [a, b): Σ_{j=1}^{i−1} k_j = the running sum of k_1..k_{b−2}
        b = min(T, a + step)
        ksum = running_sum(k[:, a - 1 : b - 1])  # [B,b−a,H_kv,D]
        if carry is not None:
            ksum += carry
        carry = ksum[:, -1:]
        torch.sum(q[:, a:b] * ksum[:, :, :, None, :], -1, out=out[1, :, a:b])
    out[0] *= scaling
    if T > 2:
        out[1, :, 2:] /= torch.arange(1, T - 1, dtype=torch.float32, device=q.device).div_(scaling).view(1, -1, 1, 1)
    stats = out.view(2, B, T, H).transpose(2, 3)
    return stats[0], stats[1]


def running_sum(x: torch.Tensor, chunk: int = 512) -> torch.Tensor:
    """torch.cumsum(x, dim=1) of x [B,n,...], in two levels where n > chunk: within chunks of `chunk` rows, then
    the chunks' totals carried. On CUDA, a cumsum along a long outer dimension runs one thread per inner element
    (23 ms for 116k rows of 192 on an H200: 46 % of a T = 131,072 scan's device time); in chunks it is parallel."""
    B, n = x.shape[:2]
    if n <= chunk:
        return torch.cumsum(x, dim=1)
    full = n - n % chunk
    head = torch.cumsum(x[:, :full].reshape(B, full // chunk, chunk, *x.shape[2:]), dim=2)
    totals = torch.cumsum(head[:, :, -1], dim=1)  # [B,chunks,...] running sum at each chunk's end
    head[:, 1:] += totals[:, :-1].unsqueeze(2)
    out = head.reshape(B, full, *x.shape[2:])
    if full == n:
        return out
    return torch.cat([out, torch.cumsum(x[:, full:], dim=1) + totals[:, -1:]], dim=1)


def value_norms(value: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """[B,T,H] ‖W_O^h v_{g(h),i}‖ = ‖R_h v‖ from value [B,H_kv,T,d_h] and `value_factor` [H_kv,d_h,G·d_h]: one GEMM
    per KV head for its G query heads (g(h) = h ÷ G; no copy of v per query head), squared in place and summed per
    head, in blocks of STAT_ROWS tokens whose temporaries stay in cache (more on an accelerator: `rows_per_block`).
    On the cpu with numba, each block's norms come from `cpu_kernels.head_norms` (one pass over its GEMM)."""
    B, Hkv, T, D = value.shape
    G = factors.shape[-1] // D
    factors = factors.to(value.device)
    step = rows_per_block(STAT_ROWS, value.device, Hkv * G * D)
    if value.device.type == "cpu" and cpu_kernels.AVAILABLE:  # each block's GEMM, then one pass for its norms
        norms = torch.empty(B, T, Hkv * G, dtype=torch.float32)
        for a in range(0, T, step):
            y = torch.matmul(value[:, :, a : a + step].float(), factors).detach()  # [B,H_kv,t,G·d_h]
            norms[:, a : a + step] = torch.from_numpy(cpu_kernels.head_norms(y.numpy(), D))
        return norms
    vn2 = torch.empty(B, Hkv, T, G, dtype=torch.float32, device=value.device)
    for a in range(0, T, step):
        y = torch.matmul(value[:, :, a : a + step].float(), factors)  # [B,H_kv,t,G·d_h]: (R_h v)ᵀ side by side
        torch.sum(y.square_().view(B, Hkv, y.shape[2], G, D), -1, out=vn2[:, :, a : a + step])
    return vn2.sqrt_().transpose(1, 2).reshape(B, T, Hkv * G)
