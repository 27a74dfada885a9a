"""The next-token NLL of a window without its [B,T,V] logits (issue 23: statistics at the cost of a plain forward).

A plain forward writes the logits [B,T,V] (100 MB at T = 512 for SmolLM2's 49,152-token vocabulary, 805 MB at
T = 4096) and a log-softmax then reads them again. Where a family's logits are its output embedding applied to the
final hidden state and nothing else (`head_of`), the NLL instead comes from blocks of the vocabulary: each block's
logits [rows, VOCAB_BLOCK] are computed by the head, reduced to their log-sum-exp and the targets' logits while in
cache, and dropped. The same matrix products and the same post-processing (soft-capping, a logit scale) run on
each block, so the numbers are the full path's up to float32 summation order:

    −log p(x_{t+1} | x_≤t) = logsumexp_v ℓ_tv − ℓ_t,x_{t+1},   logsumexp_v = logsumexp over blocks of the blocks'

Families not listed in `PLAIN_HEADS` / `SCALED_HEADS` keep the full logits and `next_token_nll`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.core.device import rows_per_block
from attnlab.tracing.fast import cpu_kernels

# a block's logits [ROW_BLOCK, VOCAB_BLOCK] fp32 = 4 MiB; measured beside the plain head on SmolLM2 (2 threads,
# interleaved): 0.92x the head's time at T = 512 and 0.94x at 2048 (the NLL included), against 1.06x and 1.17x for
# the head plus the log-softmax, with blocks of 4096 (1024 or 12,288 slower: AVX2 EPYC VM). On the Zen 4 VM (AVX-512,
# 2026-12-04) the head's GEMMs by blocks of 2048 took 171 and 185 ms against 189 and 198 ms by 4096 (two runs)
VOCAB_BLOCK = 2048
ROW_BLOCK = 512  # positions a block (the head's weight is read once per row block)

# model types whose causal-LM forward is `logits = lm_head(final hidden)` and nothing more (transformers 5)
PLAIN_HEADS = frozenset(
    "llama mistral mixtral qwen2 qwen2_moe qwen3 qwen3_moe gemma gpt2 gpt_neox gptj gpt_neo opt phi phi3 gpt_oss "
    "olmo olmo2 olmo3 falcon stablelm starcoder2 smollm3 bloom mpt deepseek_v3".split()
)


def _softcap(config: Any) -> Callable[[torch.Tensor], torch.Tensor] | None:
    cap = getattr(config, "final_logit_softcapping", None)
    return None if cap is None else (lambda x: torch.tanh(x / cap) * cap)


# model types whose logits are post-processed: the same operation on each block
SCALED_HEADS: dict[str, Callable[[Any], Callable[[torch.Tensor], torch.Tensor] | None]] = {
    "gemma2": _softcap,
    "gemma3_text": _softcap,
    "cohere": lambda c: lambda x: x * c.logit_scale,
    "cohere2": lambda c: lambda x: x * c.logit_scale,
    "granite": lambda c: lambda x: x / c.logits_scaling,
}


def head_of(model: Any) -> tuple[nn.Module, nn.Linear, Callable[[torch.Tensor], torch.Tensor] | None] | None:
    """(base model, output embedding, logit post-processing or None) when `model`'s logits are
    post(head(base(ids).last_hidden_state)); None for a family not known to be so (it keeps the full logits)."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in PLAIN_HEADS and kind not in SCALED_HEADS:
        return None
    base = getattr(model, "base_model", None)
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if base is None or base is model or type(head) is not nn.Linear:
        return None
    post = SCALED_HEADS[kind](config) if kind in SCALED_HEADS else None
    return base, head, post


def _block_logits(
    x: torch.Tensor, head: nn.Linear, v0: int, post: Callable | None, scratch: torch.Tensor
) -> torch.Tensor:  # fmt: skip
    """[n, m] fp32 logits of rows x [n,d] for the vocabulary block v0..v0+m−1: written into `scratch` (a flat fp32
    buffer of a row block·VOCAB_BLOCK, reused by every block) for a plain fp32 head, else a fresh tensor."""
    weight = head.weight[v0 : v0 + VOCAB_BLOCK]
    bias = None if head.bias is None else head.bias[v0 : v0 + VOCAB_BLOCK]
    if post is not None or weight.dtype != torch.float32 or scratch.device != x.device:
        logits = F.linear(x, weight, bias)
        return (logits if post is None else post(logits)).float()
    out = scratch[: x.shape[0] * weight.shape[0]].view(x.shape[0], weight.shape[0])
    if bias is None:
        return torch.mm(x, weight.t(), out=out)
    return torch.addmm(bias, x, weight.t(), out=out)


def _logsumexp_in_place(logits: torch.Tensor) -> torch.Tensor:
    """[n] log Σ_v exp ℓ_v of logits [n,m], which it may overwrite. torch.logsumexp allocates a temporary of the
    block's size for every call (8 MiB of fresh pages): 357 against 277 ms for SmolLM2's head at T = 512 with the
    matrix products (2 threads, AMD EPYC VM, 2026-12-03), for the same numbers. On the cpu with numba, one pass a
    row (`cpu_kernels.row_logsumexp`) instead of these four passes over the block."""
    if logits.device.type == "cpu" and cpu_kernels.AVAILABLE and logits.dtype == torch.float32:
        return torch.from_numpy(cpu_kernels.row_logsumexp(logits.contiguous().numpy())).float()
    top = logits.amax(-1, keepdim=True)
    return logits.sub_(top).exp_().sum(-1).log_().add_(top.squeeze(-1))


def _block_nll(
    x: torch.Tensor, target: torch.Tensor, head: nn.Linear, post: Callable | None, scratch: torch.Tensor
) -> torch.Tensor:  # fmt: skip
    """[n] float64 −log softmax(post(head(x)))[target] of rows x [n,d] with targets [n], by vocabulary blocks."""
    V = head.weight.shape[0]
    lses, picked = [], torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    for v0 in range(0, V, VOCAB_BLOCK):
        logits = _block_logits(x, head, v0, post, scratch)
        rows = ((target >= v0) & (target < v0 + logits.shape[1])).nonzero().squeeze(-1)
        picked[rows] = logits[rows, target[rows] - v0]  # before the log-sum-exp overwrites the block
        lses.append(_logsumexp_in_place(logits))
    return (torch.logsumexp(torch.stack(lses, dim=-1), dim=-1) - picked).double()


@torch.no_grad()
def head_nll(hidden: torch.Tensor, ids: torch.Tensor, head: nn.Linear, post: Callable | None = None) -> torch.Tensor:
    """[B] mean −log p(x_{t+1} | x_≤t) over t = 0..T−2 from the final hidden states hidden [B,T,d] (after the final
    norm) and ids [B,T], without the [B,T,V] logits (module docstring)."""
    B, T, d = hidden.shape
    x = hidden[:, :-1].reshape(-1, d)
    target = ids[:, 1:].reshape(-1).to(hidden.device)
    nll = torch.empty(x.shape[0], dtype=torch.float64, device=hidden.device)
    step = rows_per_block(ROW_BLOCK, hidden.device, VOCAB_BLOCK)
    scratch = torch.empty(min(step, x.shape[0]) * min(VOCAB_BLOCK, head.weight.shape[0]), device=hidden.device)
    for r0 in range(0, x.shape[0], step):
        rows = slice(r0, r0 + step)
        nll[rows] = _block_nll(x[rows], target[rows], head, post, scratch)
    return nll.view(B, T - 1).mean(-1).float().cpu() if T > 1 else torch.zeros(B)


def next_token_nll(logits: torch.Tensor, ids: torch.Tensor, rows: int = 16) -> torch.Tensor:
    """[B] mean −log p(x_{t+1} | x_≤t) over t = 0..T−2. logits [B,T,V], ids [B,T].

    The log-softmax runs over chunks of `rows` positions, whose [B,rows,V] copy stays in cache: no [B,T,V] copy
    is made (0.75 GiB at T = 4096 for a 49k vocabulary), and it is 4× faster at T = 512 on one core."""
    B, T, _ = logits.shape
    target = ids[:, 1:, None].to(logits.device)
    total = torch.zeros(B, dtype=torch.float64, device=logits.device)
    for t0 in range(0, T - 1, rows):
        logp = torch.log_softmax(logits[:, t0 : min(T - 1, t0 + rows)].float(), dim=-1)
        total -= logp.gather(-1, target[:, t0 : t0 + logp.shape[1]]).squeeze(-1).double().sum(-1)
    return (total / max(T - 1, 1)).float().cpu()
