"""Sliding-window attention as a KV-cache policy, through a 4D additive attention mask (spec extreme-tokens §14,
R23; StreamingLLM's "attention sink + window").

Query i sees key j when j ≤ i and (j > i − W or j < n_sink): the last W keys (the window holds W keys, itself
included) and, with sinks, the first n_sink keys (n_sink = 0: plain window; W = None: full causal attention). The
mask [1, 1, T, T] holds 0 where visible and the dtype's most negative value elsewhere, and goes to the model as
its `attention_mask` through the trace layer's forward (`traced(model)`, `TraceSession.forward`; transformers uses
a 4D mask as given, for eager and sdpa attention alike). Position ids are left to the model: 0..T−1, the positions
of the full window, so every kept key keeps its distance to the query.

Stacked layers widen what a position depends on: after L layers, position i still depends on tokens down to
i − L·(W − 1) through the window (a KV cache built token by token behaves the same way: each cached key was
computed under its own window).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from attnlab.tracing.adapters.hf import TraceSession, traced


def visible(seq_len: int, window: int | None, sink_tokens: int = 0) -> torch.Tensor:
    """[T, T] bool: key j visible to query i (module docstring)."""
    i = torch.arange(seq_len).unsqueeze(1)
    j = torch.arange(seq_len).unsqueeze(0)
    keep = j <= i
    if window is not None:
        keep &= (j > i - window) | (j < sink_tokens)
    return keep


def window_mask(seq_len: int, window: int | None, sink_tokens: int = 0, dtype: torch.dtype = torch.float32):
    """[1, 1, T, T] additive mask: 0 where `visible`, torch.finfo(dtype).min elsewhere."""
    keep = visible(seq_len, window, sink_tokens)
    mask = torch.zeros(seq_len, seq_len, dtype=dtype).masked_fill_(~keep, torch.finfo(dtype).min)
    return mask[None, None]


def model_dtype(model: nn.Module) -> torch.dtype:
    """The floating dtype of the model's parameters (the mask's dtype)."""
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


def session_masked_logits(
    sess: TraceSession, ids: torch.Tensor, window: int | None, sink_tokens: int = 0
) -> torch.Tensor:
    """[B, T, V] logits of `ids` [B, T] with the window mask, one forward of a `traced` session (W = None: full
    causal attention, same mask path)."""
    mask = window_mask(ids.shape[1], window, sink_tokens, model_dtype(sess.model))
    return sess.forward(ids, attention_mask=mask)


def masked_logits(model: nn.Module, ids: torch.Tensor, window: int | None, sink_tokens: int = 0) -> torch.Tensor:
    """[B, T, V] logits of `ids` [B, T] with the window mask, through the trace layer's forward."""
    with traced(model) as sess:
        return session_masked_logits(sess, ids, window, sink_tokens)


def position_nll(logits: torch.Tensor, ids: torch.Tensor) -> np.ndarray:
    """[B, T−1] −log p(x_{t+1} | x_≤t) for t = 0..T−2 (logits [B,T,V], ids [B,T])."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return -logp.gather(-1, ids[:, 1:, None].to(logp.device)).squeeze(-1).cpu().numpy()


def windows_position_nll(
    model: nn.Module, ids: torch.Tensor, window: int | None, sink_tokens: int, batch_size: int
) -> np.ndarray:
    """[N, T−1] per-position NLL of windows `ids` [N, T] under one window policy (one `traced` block)."""
    out = []
    with traced(model) as sess:
        for b in range(0, ids.shape[0], batch_size):
            batch = ids[b : b + batch_size]
            out.append(position_nll(session_masked_logits(sess, batch, window, sink_tokens), batch))
    return np.concatenate(out)
