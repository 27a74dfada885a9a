"""Which attention kernel runs (issue 41): the names a trace records, and the refusal of sdpa's T×T math fallback.

`Trace.attention_paths` names, per layer, the kernel that computed the attention output:

- flash: torch's flash-attention kernel: on the cpu `aten._scaled_dot_product_flash_attention_for_cpu` (the default
  fused path, and `stats="full"` under a mask or a learned sink), on CUDA flash-attention 2;
- cudnn: cuDNN's fused attention (CUDA; sdpa's own first choice on Hopper);
- efficient: the memory-efficient kernel (CUDA; also every masked layer there);
- math: sdpa's reference kernel, which holds the [B,H,T,T] scores: never run by a trace (our paths call the kernels
  above directly); checked before a forward that leaves the model its own sdpa (`check_math_fallback`);
- blocked: our cpu `stats="full"` path (`tracing.fast.full_rows_attention`: query blocks, GEMMs, one numba pass);
- eager: the exact chunked function (`hf_attention.attnlab_attention`) or the toy model's whole patterns;
- flex: not an output kernel: `stats="full"`'s second call on CUDA ran through PyTorch's FlexAttention
  (`tracing.fast.flex`), noted after the output's kernel ("cudnn+flex"); the other second call (the swapped fused
  call, `fused.swapped_statistics`) is not noted.

Torch's sdpa falls back to its math kernel, silently, when no fused kernel takes the inputs (on the cpu: dropout in
training mode, value heads of another size than the query heads, a non-contiguous last dimension, a dtype the
kernels lack); the math kernel then allocates the [B,H,T,T] scores and weights, 45 GiB at 27k tokens in the reports
that motivated this. Decision (docs/real-models.md §13.14): such a forward is refused with one `InputError` line
before it starts when its scores would not fit the memory budget (half the RAM on the cpu, 90 % of the free device
memory on a GPU, `attnlab.runs.budget`); a math fallback that fits runs, as sdpa would run it.
"""

from __future__ import annotations

from typing import Any

import torch

from attnlab.errors import InputError

KERNELS = ("flash", "cudnn", "efficient", "math", "blocked", "eager", "flex")
_SDPA = ("math", "flash", "efficient", "cudnn")  # by torch.nn.attention.SDPBackend value


def sdpa_choice(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout: float,
                causal: bool) -> str:  # fmt: skip
    """The kernel name torch's sdpa picks for q [B,H,T,d], k [B,H,Tk,d], v [B,H,Tk,d_v] (`torch._fused_sdp_choice`,
    the function sdpa itself calls)."""
    choice = int(torch._fused_sdp_choice(q, k, v, mask, dropout, causal))
    return _SDPA[choice] if 0 <= choice < len(_SDPA) else "math"


def math_scores_bytes(batch: int, heads: int, seq_len: int, dtype: torch.dtype) -> int:
    """Bytes of the math kernel's scores and weights: 2 · B · H · T² elements, at least 4 bytes each."""
    return 2 * batch * heads * seq_len * seq_len * max(4, torch.empty((), dtype=dtype).element_size())


def model_sdpa_choice(model: Any, heads: tuple[int, int, int], dtype: torch.dtype, device: torch.device,
                      masked: bool) -> str:  # fmt: skip
    """The kernel sdpa would pick for `model`'s attention: heads = (H, H_kv, d_h); the value head size from the
    config (`v_head_dim`) where it differs; dropout only in training mode; probed on stand-in tensors of 16 tokens
    (the choice depends on the dtype, device, head sizes, dropout and mask, not on T)."""
    H, Hkv, D = heads
    cfg = model.config
    dv = int(getattr(cfg, "v_head_dim", None) or D)
    qk = int(getattr(cfg, "qk_nope_head_dim", 0) or 0) + int(getattr(cfg, "qk_rope_head_dim", 0) or 0)
    D = qk or D  # multi-head latent attention: query/key heads of nope + rope coordinates
    dropout = float(getattr(cfg, "attention_dropout", 0.0) or 0.0) if model.training else 0.0
    n = 16
    q = torch.empty(1, H, n, D, dtype=dtype, device=device)
    k = torch.empty(1, H, n, D, dtype=dtype, device=device)
    v = torch.empty(1, H, n, dv, dtype=dtype, device=device)
    mask = torch.ones(n, n, dtype=torch.bool, device=device).tril() if masked else None
    return sdpa_choice(q, k, v, mask, dropout, not masked)


def check_math_fallback(model: Any, heads: tuple[int, int, int], ids_shape: tuple[int, int], masked: bool) -> None:
    """Before a forward of `model` (its own sdpa attention) on ids [B,T]: one InputError line when sdpa would run
    its math kernel and the [B,H,T,T] scores would not fit the memory budget (module docstring)."""
    from attnlab.runs import budget

    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return
    param = next(model.parameters())
    dtype, device = param.dtype, param.device
    if model_sdpa_choice(model, heads, dtype, device, masked) != "math":
        return
    B, T = ids_shape
    need = math_scores_bytes(B, heads[0], T, dtype)
    cap = budget.memory_limit() if device.type == "cpu" else _device_bytes(device)
    if cap is not None and need > cap:
        raise InputError(
            f"torch would run this model's attention through its math kernel (no fused kernel takes these inputs: "
            f"{dtype}, {'dropout in training mode, ' if model.training else ''}head size {heads[2]}), whose "
            f"[{B},{heads[0]},{T},{T}] scores need {need / 2**30:.3g} GiB (limit {cap / 2**30:.3g} GiB); use shorter "
            f"windows, a smaller batch, model.eval(), or trace it (attnlab's own kernels never hold the scores)"
        )


def _device_bytes(device: torch.device) -> int | None:
    """90 % of the free memory of an accelerator (`attnlab.core.device.memory_bytes`)."""
    from attnlab.core.device import memory_bytes

    return memory_bytes(device)
