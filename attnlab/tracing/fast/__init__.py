"""The trace layer's speed paths, behind one door: what the rest of `attnlab` calls of them is exported here, and
nothing outside this package imports its submodules.

    cpu_kernels   numba-compiled loops over the host's tensors (optional: without numba every caller takes its torch
                  path; `kernels_available`)
    statistics    a traced layer's O(T·d_h) logit statistics and value norms (`logit_stats`, `value_norms`)
    fused         the fused attention path: torch's fused kernel and exact statistics from its log-sum-exp
                  (`fused_layer`); the adapter's attention function chooses it where it is exact
    flex          `stats="full"`'s second call through PyTorch's compiled FlexAttention on CUDA (`FlexCalls`, held by
                  the trace session)
    nll           the next-token NLL from blocks of the vocabulary, without the [B,T,V] logits (`head_nll`)
    staging       the recorder's per-batch buffers of per-layer rows (`BatchStage`) and the grouping by query token
"""

from __future__ import annotations

from attnlab.tracing.fast.cpu_kernels import entries_over, kernels_available, stream_stats
from attnlab.tracing.fast.flex import FlexCalls
from attnlab.tracing.fast.fused import fused_layer
from attnlab.tracing.fast.nll import head_nll, head_of, next_token_nll
from attnlab.tracing.fast.staging import BatchStage, add_by_token, by_token, token_accumulator
from attnlab.tracing.fast.statistics import logit_stats, value_norms

__all__ = [
    "BatchStage",
    "FlexCalls",
    "add_by_token",
    "by_token",
    "entries_over",
    "fused_layer",
    "head_nll",
    "head_of",
    "kernels_available",
    "logit_stats",
    "next_token_nll",
    "stream_stats",
    "token_accumulator",
    "value_norms",
]
