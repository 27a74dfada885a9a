"""Extra statistics: the public way to add a reduction to a `TraceRecorder` (issue 19).

A study that needs more than the `Trace` holds subclasses `ExtraStatistic`, overrides the moments it needs and
hands instances to the recorder (`TraceRecorder(..., extras={"name": stat})`, or `new_recorder` / `trace_windows`
of `attnlab.tracing.adapters.hf` with `extras=`). The recorder calls every extra at the moments it reduces its own
statistics, with the same tensors, and `TraceRecorder.extra_results()` hands back {name: stat.result()}:

    begin_batch(shape)                       a batch starts; shape: `BatchShape` (B, L, H, T, R)
    attention_rows(layer, q0, rows)          rows [B,H,C,K] = A[:, :, q0:q0+C, :K] (query, key), fp32, causal,
                                             on the layer's device; per query chunk in order (real models), or the
                                             whole pattern at once with q0 = 0, C = K = T (toy models)
    key_set(layer) -> keys [J] | None        on the fused path (`attnlab.tracing.fast.fused_layer`): the few keys
                                             whose column sums the statistic needs from this layer; None (the
                                             default for a statistic that overrides attention_rows): whole rows,
                                             and the layer runs through the exact chunked path instead
    attention_columns(layer, keys, sums)     sums [B,H,J] = Σ_i A[:, :, i, keys] over every query (fused path)
    residual(index, hidden)                  hidden [B,T,d] as the model holds it (device, dtype); index 0 = after
                                             the embedding, l+1 = after block l
    end_batch()                              the batch is complete (called before the next batch and by `result()`)

Example: per-window column sums of every layer's attention, Σ_j A[b,l,h,j,i] -> [N,L,H,T]:

    class Columns(ExtraStatistic):
        def begin_batch(self, shape):
            self.batch = torch.zeros(shape.batch, shape.layers, shape.heads, shape.seq_len)
        def attention_rows(self, layer, q0, rows):
            self.batch[:, layer, :, : rows.shape[-1]] += rows.sum(2).cpu()
        ...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class BatchShape:
    """The shape of one recorded batch: `batch` sequences of `seq_len` tokens through `layers` layers of `heads`
    heads, with `streams` residual streams (layers + 1: the embedding output and each block's output)."""

    batch: int
    layers: int
    heads: int
    seq_len: int
    streams: int


class ExtraStatistic:
    """A statistic a study adds to a `TraceRecorder` (module docstring); every moment is a no-op by default."""

    def begin_batch(self, shape: BatchShape) -> None:
        """A batch of `shape.batch` sequences starts."""

    def attention_rows(self, layer: int, q0: int, rows: torch.Tensor) -> None:
        """Rows q0..q0+C−1 of layer `layer`'s pattern, rows [B,H,C,K] fp32 (keys beyond K have no weight)."""

    def key_set(self, layer: int) -> torch.Tensor | None:
        """The keys [J] (long) whose column sums this statistic needs from layer `layer` on the fused path, or
        None: it needs whole rows (`attention_rows`), so the layer takes the chunked path."""
        return None

    def attention_columns(self, layer: int, keys: torch.Tensor, sums: torch.Tensor) -> None:
        """sums [B,H,J] fp32: Σ over every query i of A[:, :, i, keys] (the fused path's answer to `key_set`)."""

    def residual(self, index: int, hidden: torch.Tensor) -> None:
        """Residual stream `index` (0 = embedding output, l+1 = after block l), hidden [B,T,d]."""

    def end_batch(self) -> None:
        """The batch begun last is complete."""

    def result(self) -> Any:
        """What the statistic hands back through `TraceRecorder.extra_results()` (None by default)."""
        return None


def needs_attention(extra: Any) -> bool:
    """Whether an `ExtraStatistic` reads attention at all (it overrides `attention_rows`)."""
    return type(extra).attention_rows is not ExtraStatistic.attention_rows
