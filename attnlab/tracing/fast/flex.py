"""`stats="full"` on CUDA through PyTorch's FlexAttention (issue 41 item 1: "try what exists first").

The statistics are those of `fused.swapped_statistics` (its docstring derives them): one more attention call with
queries and keys swapped gives the column sums c_j = Σ_i A_ij as the exponential of its log-sum-exp and, from its
output, the sum of normalised row entropies. That function carries the per-key bias −lse_i as one more coordinate
of float32 queries and keys on CUDA (head width d_h + 1 rounded up to 8): 17.6× a plain forward at T = 131,072 on
an H200 (issue 41). Here the same call runs through `flex_attention`, which takes the bias as a `score_mod`
(score + bias[b, h, kv_idx]), so that:

- queries and keys stay the model's own tensors in its dtype (bf16), head width d_h, no padding, no copy of q;
  flex accumulates the scores, the log-sum-exp and the output in float32 and returns the output in the inputs'
  dtype (as the fused kernels of the forward do);
- the causal mask is a `BlockMask` (`upper_block_mask`): the swapped "queries" are the keys j and the swapped
  "keys" the queries i, so the forward's causal i ≥ j is the upper triangle kv_idx ≥ q_idx, with no flipping in
  time (the CPU/efficient-kernel path reverses both sequences instead). It is built from its blocks directly,
  O((T/128)²) integers: `create_block_mask` would evaluate the mask on all T² pairs (17 GB at T = 131,072);
- a boolean mask [B|1,1|H,T,Tk] (padding, a window) is read transposed by the `mask_mod` and its blocks come from
  `create_block_mask` (the same T² booleans the mask itself holds).

Decision: this path runs on CUDA only (`flex_applies`); the CPU keeps `full_rows_attention` and the swapped call,
whose numbers it leaves unchanged. Flex must be compiled to be fast (uncompiled it materialises the scores): the
session holds one `torch.compile` of `swapped_call` (`TraceSession.flex_calls`). A new `torch.compile` wrapper of the
same function finds dynamo's cache on the function's code object, so the kernel compiles once per process, not once
per session (torch 2.13, cpu: a second wrapper's first call of an already compiled function took 1 ms against 46 s
for the first), with no module-level state of ours. APIs used exist in torch ≥ 2.9 (`AuxRequest`; the GPU machine
has 2.11): `flex_attention(score_mod, block_mask, scale, return_aux)`, `create_block_mask`,
`BlockMask.from_kv_blocks(kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices, BLOCK_SIZE, mask_mod,
seq_lengths)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

FLEX: Any  # torch.nn.attention.flex_attention where it has `return_aux` (torch ≥ 2.9), else None
try:
    import torch.nn.attention.flex_attention as _flex_module

    FLEX = _flex_module if hasattr(_flex_module, "AuxRequest") else None
except ImportError:  # pragma: no cover - torch < 2.5: the swapped fused call serves
    FLEX = None

BLOCK = 128  # flex's default sparse block size (tokens a side)

SwappedCall = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def available() -> bool:
    """Whether this torch has FlexAttention with `return_aux` (torch ≥ 2.9)."""
    return FLEX is not None


def flex_applies(query: torch.Tensor, key: torch.Tensor, bool_mask: torch.Tensor | None) -> bool:
    """Whether `stats="full"` of this layer runs through flex (`flex_statistics`): on CUDA, flex available, a head
    of at least 16 coordinates (flex's minimum), and plain causal rows (Tk = T) or a boolean mask [B|1,1|H,T,Tk]."""
    if query.device.type != "cuda" or not available() or query.shape[-1] < 16:
        return False
    if bool_mask is None:
        return key.shape[2] == query.shape[2]
    return bool_mask.dim() == 4 and bool_mask.shape[1] in (1, query.shape[1]) and bool_mask.shape[-2] == query.shape[2]


def swapped_call(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor, block_mask: Any, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(O′ [B,H,Tk,d] in the inputs' dtype, lse′ [B,H,Tk] fp32) of softmax_i(scale·queries_j·keys_i + bias_i) over
    the pairs `block_mask` keeps, against `values`. queries [B,H,Tk,d], keys and values [B,H,T,d], bias [B,H,T]
    fp32. The function `FlexCalls` compiles: the score_mod is made inside it, so that the bias is an input of the
    compiled graph (a new tensor each layer, no recompilation)."""

    def add_bias(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
                 kv_idx: torch.Tensor) -> torch.Tensor:  # fmt: skip
        return score + bias[b, h, kv_idx]

    out, aux = FLEX.flex_attention(queries, keys, values, score_mod=add_bias, block_mask=block_mask, scale=scale,
                                   return_aux=FLEX.AuxRequest(lse=True))  # fmt: skip
    return out, aux.lse


def _upper(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
    """The swapped call's causal mask: swapped query j (a key) sees swapped key i (a query) when i ≥ j."""
    return kv_idx >= q_idx


def upper_block_mask(T: int, device: torch.device, block: int = BLOCK) -> Any:
    """The `BlockMask` of `_upper` on T × T, built from its [n,n] blocks (n = ⌈T/block⌉), as `create_block_mask`
    would give it: in query block m, block m is partial (the diagonal), blocks m+1.. are full except the last one
    when T is not a multiple of `block` (its padding is masked, so it is partial too), blocks before m are empty."""
    n = -(-T // block)
    m = torch.arange(n, device=device)
    diagonal = m.view(-1, 1) == m.view(1, -1)
    ragged = (m.view(1, -1) == n - 1) & (m.view(-1, 1) <= n - 1) & (T % block != 0)
    partial = diagonal | ragged
    full = (m.view(1, -1) > m.view(-1, 1)) & ~partial
    (num, idx), (full_num, full_idx) = _block_lists(partial), _block_lists(full)
    return FLEX.BlockMask.from_kv_blocks(num, idx, full_num, full_idx, block, _upper, (T, T))


def _block_lists(dense: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(counts [1,1,n] int32, indices [1,1,n,n] int32: each row's blocks first, ascending) of a [n,n] bool block
    map, the layout `BlockMask.from_kv_blocks` takes."""
    order = torch.argsort((~dense).to(torch.int8), dim=-1, stable=True)
    return dense.sum(-1).to(torch.int32)[None, None], order.to(torch.int32)[None, None]


def masked_block_mask(bool_mask: torch.Tensor, block: int = BLOCK) -> Any:
    """The swapped call's `BlockMask` of a boolean mask [B|1,1|H,T,Tk] (True = query i sees key j): swapped query j
    sees swapped key i when bool_mask[b, h, i, j]; blocks by `create_block_mask` over the same T·Tk booleans."""
    Bm, Hm, T, Tk = bool_mask.shape
    visible = bool_mask

    def transposed(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        return visible[b if Bm > 1 else 0, h if Hm > 1 else 0, kv_idx, q_idx]

    return FLEX.create_block_mask(transposed, Bm, Hm, Tk, T, device=bool_mask.device, BLOCK_SIZE=block)


@dataclass
class FlexCalls:
    """What a trace session keeps for the flex path: the (compiled) swapped call and the causal block masks by
    (T, device) (one per length, shared by the layers)."""

    attend: SwappedCall
    masks: dict[tuple[int, str], Any] = field(default_factory=dict)

    @classmethod
    def compiled(cls) -> FlexCalls:
        """The session's calls with `swapped_call` compiled (module docstring: compiled once per process)."""
        return cls(torch.compile(swapped_call))

    def causal(self, T: int, device: torch.device) -> Any:
        """`upper_block_mask(T)` on `device`, made once per length."""
        key = (T, str(device))
        if key not in self.masks:
            self.masks[key] = upper_block_mask(T, device)
        return self.masks[key]


def flex_statistics(
    q: torch.Tensor, k: torch.Tensor, lses: tuple[torch.Tensor, torch.Tensor], bool_mask: torch.Tensor | None,
    scale: float, calls: FlexCalls,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """`swapped_statistics` through flex: (col_sum [B,H,Tk] fp32 c_j = Σ_i A_ij, entropy_sum [B,H] float64
    Σ_{i≥1} H_i / log(i+1)), same contract: lses = (lse, lse_keys) [B,H,T] fp32 (the same tensor without a learned
    sink); q [B,H,T,d], k [B,H_kv,Tk,d] (query head h reads KV head h ÷ (H/H_kv)), in the model's dtype; bool_mask
    [B|1,1|H,T,Tk] or None (causal). The swapped values are u_i = w_i·r_i·scale·q_i in q's dtype (w_i = 1/log(i+1),
    r_i = exp(lse_i − lse_keys_i)); Σ_{i≥1} H_i/log(i+1) = Σ_{i seeing a key} w_i·lse_keys_i − Σ_j c_j k_j·O′_j."""
    lse, lse_keys = lses
    B, H, T, _ = q.shape
    wide = torch.promote_types(lse.dtype, torch.float32)  # fp32 on CUDA (float64 in the tests)
    zero = torch.zeros((), dtype=wide, device=q.device)
    i = torch.arange(T, device=q.device, dtype=wide)
    w = torch.where(i > 0, 1.0 / torch.log1p(i.clamp_min(1.0)), zero)  # [T]
    seen = torch.ones(1, 1, T, dtype=torch.bool, device=q.device) if bool_mask is None else bool_mask.any(-1)
    bias = torch.where(seen, -lse, zero).expand(B, H, T).contiguous()  # 0 on a row that sees nothing
    weight = torch.where(seen, torch.exp(lse - lse_keys), zero) * w * scale  # [B,H,T] w_i·r_i·scale (0: unseen)
    values = torch.mul(q, weight.unsqueeze(-1)).to(q.dtype)  # the product in `wide`, one rounding to q's dtype
    keys_h = k.repeat_interleave(H // k.shape[1], dim=1) if k.shape[1] != H else k
    mask = calls.causal(T, q.device) if bool_mask is None else masked_block_mask(bool_mask)
    out, lse_t = calls.attend(keys_h, q, values, bias, mask, scale)
    cols = torch.exp(lse_t)  # exp(−inf) = 0 for a key no query sees
    if bool_mask is not None:
        cols = torch.where(bool_mask.any(-2).expand(B, H, -1), cols, zero.to(cols.dtype))
    dots = _row_dots(keys_h, out, wide).double()  # k_j·O′_j
    terms = torch.where(cols > 0, cols.double() * dots, torch.zeros((), dtype=torch.float64, device=q.device))
    rows = torch.where(seen, w * lse_keys, zero).double()
    return cols, rows.sum(-1) - terms.sum(-1)


def _row_dots(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[B,H,T] Σ_d a·b of a, b [B,H,T,d] in `dtype`, one head at a time: the widened copies stay one head's size
    (2·B·T·d·4 bytes: 33 MB for a Llama-3-8B head at T = 32,768, against 1 GB for all heads at once)."""
    return torch.stack([(a[:, h].to(dtype) * b[:, h].to(dtype)).sum(-1) for h in range(a.shape[1])], dim=1)
