"""`TraceRecorder`: streaming reducers that turn per-layer tensors into a `Trace` (spec extreme-tokens §5).

A model (toy or real) calls, for every batch:
  `begin_batch(tokens)`                          tokens: [B,T] int (or None: no grouping by token)
  `attention(layer, pattern, scores)`            pattern, scores: [B,H,T,T]; scores are raw pre-mask logits
  `value_norms(layer, norms)`                    norms: [B,T,H] = ‖W_O^h v^h_i‖
  `residual(index, hidden)`                      hidden: [B,T,d]; index 0 = embedding output, l+1 = after block l
and finally `result()`. `extras` {name: `ExtraStatistic`} (attnlab.tracing.extras) add a study's own statistics:
each is called at the same moments with the same tensors, and `extra_results()` hands back their results. Sums and
counts are float64; nothing of size T² is kept unless `keep_patterns` names a
head as (layer, head).

Real models never hold a whole [B,H,T,T] pattern: their adapter (`trace.adapters.hf`) calls, per layer,
`attention_rows(layer, q0, rows, scores)` for consecutive query chunks rows = A[:, :, q0:q1, :] (fp32, reduced in
fp32 and accumulated in float64), then `logits(layer, s0, rest)` with the two logit statistics of spec §5
computed from q and k directly (O(T·d_h)). Both paths fill the same accumulators, so `result()` returns the same
`Trace` (tested to 1e-5 against `output_attentions`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from attnlab.errors import AttnlabError
from attnlab.tracing.extras import BatchShape, ExtraStatistic
from attnlab.tracing.fast import BatchStage, add_by_token, by_token, kernels_available, token_accumulator
from attnlab.tracing.format import Trace
from attnlab.tracing.selection import (
    StreamStats,
    cpu_stream_stats,
    device_stream_stats,
    device_stream_tensors,
    faster_method,
    lower_median,
    stream_from_vector,
)
from attnlab.tracing.sinks import SinkCollector

MASSIVE_ABS = 100.0  # Sun et al.: |h| > 100 ...
MASSIVE_REL = 1000.0  # ... and > 1000 × the median |h| of the layer
MAX_MASSIVE_ENTRIES = 64  # keep the largest this many entries per residual stream


def attention_sums(A: torch.Tensor, S: torch.Tensor | None, i: torch.Tensor) -> dict[str, torch.Tensor]:
    """The reductions of one layer's whole pattern A [B,H,T,T] (float64, causal) that `TraceRecorder.attention`
    accumulates, computed on A's device: `col_sum` [H,T] Σ_b Σ_i A_ij; `key0` [B,H,T] A_i0; the row entropy of rows
    i ≥ 1 (renormalised, divided by log(i+1), empty rows skipped) as `ent_sum`, `ent_count` and `empty` [H]; with
    the raw scores S [B,H,T,T], `s0` [B,H,T] = s_i0 and `rest` [B,H,T] = mean_{1≤j≤i−1} s_ij. i: [T] float64
    positions 0..T−1 on A's device."""
    T = A.shape[-1]
    zero = torch.zeros((), dtype=A.dtype, device=A.device)
    rows = A[:, :, 1:, :]  # [B,H,T-1,T]
    mass = rows.sum(-1)  # [B,H,T-1]
    nonempty = mass > 0
    p = rows / mass.clamp_min(1e-300).unsqueeze(-1)
    ent = -(torch.where(p > 0, p * p.clamp_min(1e-300).log(), zero)).sum(-1)
    ent = ent / torch.log(i[1:] + 1.0)
    out = {
        "col_sum": A.sum(dim=(0, 2)),
        "key0": A[..., 0],
        "ent_sum": torch.where(nonempty, ent, zero).sum(dim=(0, 2)),
        "ent_count": nonempty.to(torch.float64).sum(dim=(0, 2)),
        "empty": (~nonempty).to(torch.float64).sum(dim=(0, 2)),
    }
    if S is not None:
        # mean over keys 1..i-1 of s_ij: strictly-lower-triangular part excluding column 0.
        lower = torch.tril(torch.ones(T, T, dtype=torch.bool, device=A.device), diagonal=-1)
        lower[:, 0] = False
        out["s0"], out["rest"] = S[..., 0], torch.where(lower, S, zero).sum(-1) / (i - 1).clamp_min(1.0)
    return out


class TraceRecorder:
    """Accumulates the trace of an `n_layers`-layer, `n_heads`-head model on sequences of length `seq_len`.

    `vocab_size` > 0 enables grouping of key-0 attention and Δlogit by query token.
    `keep_patterns`: iterable of (layer, head) whose full [T,T] patterns are kept per sequence.
    `extras`: {name: `ExtraStatistic`} called beside the recorder's own reductions (`extra_results()`).
    `device`: where the [L,H,T] accumulators live (default the cpu). On an accelerator (the model's device, as
    `new_recorder` passes it) the float64 sums run there, a batch's per-layer rows stay there, and the residual
    streams' statistics are packed on the device and read back once per batch (`defer_streams`): no
    synchronisation per statistic (issue 41 item 2); `result()` copies the sums to the host once.
    """

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        seq_len: int,
        vocab_size: int = 0,
        keep_patterns=(),
        n_resid: int | None = None,
        extras: Mapping[str, ExtraStatistic] | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        L, H, T, V = n_layers, n_heads, seq_len, vocab_size
        self.L, self.H, self.T, self.V = L, H, T, V
        self.R = n_resid if n_resid is not None else L + 1
        self.device = torch.device("cpu") if device is None else torch.device(device)
        self._device_sums()
        self._stream_sums()
        f64 = torch.float64  # host sums and counts; `_device_sums`: the sums on `device`
        self.key0_tok_sum, self.dlogit_tok_sum = token_accumulator(V, L, H), token_accumulator(V, L, H)  # [V,L,H]
        self.tok_count, self.dlogit_count = torch.zeros(max(V, 1), dtype=f64), torch.zeros(max(V, 1), dtype=f64)
        self.vnorm_batches = torch.zeros(L, dtype=f64)
        self.keep = {(int(l), int(h)) for l, h in keep_patterns}
        self.patterns: dict[str, list[np.ndarray]] = {f"{l}.{h}": [] for l, h in sorted(self.keep)}
        self.sink_per_sample: list[torch.Tensor] = []  # one [B,L,H] block per batch
        self.col0_per_sample: list[torch.Tensor] = []
        self.n_seq = 0
        self.attn_batches = torch.zeros(L, dtype=f64)
        self.lsink_sum: torch.Tensor | None = None  # [L,H,T] Σ over sequences of the learned sink's mass, if any
        self._tokens: torch.Tensor | None = None
        self._stage = BatchStage(L, self.device)  # the batch's per-layer rows, reduced when it ends (`_reduce_stage`)
        # residual streams reduced at the batch's end in one read-back (`_reduce_streams`): on an accelerator
        self.defer_streams = self.device.type != "cpu"
        self._streams: list[tuple[int, torch.Tensor, tuple[int, int, int]]] = []  # (index, packed vector, shape)
        self._col0_layers: list[int] = []  # layers of the batch whose column sums hold key 0 only (fast fused path)
        self._batch_sink: torch.Tensor | None = None
        self._batch_col0: torch.Tensor | None = None
        self._B = 0
        self._pattern_parts: dict[tuple[int, int], list[torch.Tensor]] = {}
        self._product = torch.empty(0)  # scratch for the row entropy's A ⊙ S (reused: no page faults per chunk)
        self._scratch = torch.empty(0)  # scratch for a residual stream's |x| (`_abs_scratch`)
        self._median_method: str | None = None  # the faster exact selection here, timed on the first stream
        self._rows = torch.empty(0)  # per-row buffers of the layer being recorded by chunks (`_start_rows`)
        self._lse_rows = True
        self.extras: dict[str, ExtraStatistic] = dict(extras or {})
        self.paths: list[str] = [""] * L  # the attention kernel each layer ran (`attention_path`; "" = unknown)
        self.partial_rows = torch.zeros(L, dtype=torch.bool)  # a batch went fused without full-row statistics
        self.sinks, self._seq_cols = SinkCollector(L, T), torch.empty(0)  # secondary sinks; [B,H,T] chunked column sums

    def _stream_sums(self) -> None:
        """The residual streams' float64 accumulators on the host, [R, T] and [R] (scalars merged per stream: numpy
        views update them in ~0.1 µs), and the massive entries kept per stream."""
        R, f64 = self.R, torch.float64
        self.resid_sum = torch.zeros(R, self.T, dtype=f64)
        self.resid_count = torch.zeros(R, dtype=f64)
        self.max_abs = torch.zeros(R, dtype=f64)
        self.max_pos = torch.full((R,), -1.0, dtype=f64)
        self.max_dim = torch.full((R,), -1.0, dtype=f64)
        self.median_sum = torch.zeros(R, dtype=f64)
        self.median_count = torch.zeros(R, dtype=f64)
        self.massive: list[list[dict]] = [[] for _ in range(R)]

    def _device_sums(self) -> None:
        """The float64 accumulators on the recorder's device: [L,H,T] sums of key-0 weights, column sums, logit
        statistics and value norms, [L,H] entropy sums and counts, and positions. The [V,L,H] sums by query token
        stay on the host (`token_accumulator`: pages touched only for the tokens seen; on a GPU they would be 1 GiB
        each for a 128k vocabulary and 32 × 32 heads), fed once per batch."""
        L, H, T = self.L, self.H, self.T
        dev: dict[str, Any] = {"dtype": torch.float64, "device": self.device}
        self.col_sum = torch.zeros(L, H, T, **dev)
        self.key0_sum = torch.zeros(L, H, T, **dev)
        self.logit0_sum = torch.zeros(L, H, T, **dev)
        self.logit_rest_sum = torch.zeros(L, H, T, **dev)
        self.ent_sum = torch.zeros(L, H, **dev)
        self.ent_count = torch.zeros(L, H, **dev)
        self.empty = torch.zeros(L, H, **dev)
        self.vnorm_sum = torch.zeros(L, H, T, **dev)
        self._i = torch.arange(T, **dev)  # positions

    # ------------------------------------------------------------------------------------------------------
    def begin_batch(self, tokens: torch.Tensor | None, batch_size: int | None = None) -> None:
        """Start a batch; `tokens` [B,T] groups statistics by query token (None: no grouping)."""
        self._flush_batch()
        if tokens is not None:
            if tokens.dim() != 2 or tokens.shape[1] != self.T:
                raise AttnlabError(f"trace expects tokens of shape [batch, {self.T}], got {tuple(tokens.shape)}")
            if self.V and int(tokens.max()) >= self.V:
                raise AttnlabError(f"token id {int(tokens.max())} >= vocabulary size {self.V}")
            batch_size = tokens.shape[0]
        self._tokens = tokens.detach().cpu().long() if tokens is not None else None
        self._stage.reset()
        self._col0_layers = []
        if batch_size is None:
            raise AttnlabError("begin_batch needs tokens or batch_size")
        self._B = int(batch_size)
        self._batch_sink = torch.full((self._B, self.L, self.H), float("nan"), dtype=torch.float64, device=self.device)
        self._batch_col0 = torch.full((self._B, self.L, self.H), float("nan"), dtype=torch.float64, device=self.device)
        self._pattern_parts = {}
        shape = BatchShape(batch=self._B, layers=self.L, heads=self.H, seq_len=self.T, streams=self.R)
        for extra in self.extras.values():
            extra.begin_batch(shape)
        self.sinks.begin_batch(self._B, self.n_seq, tokens)

    def _flush_batch(self) -> None:
        if self._batch_sink is not None and self._batch_col0 is not None:
            self._reduce_stage()
            self._reduce_streams()
            self.sinks.end_batch()
            self.sink_per_sample.append(self._batch_sink.cpu())
            self.col0_per_sample.append(self._batch_col0.cpu())
            self.n_seq += self._B
            self._batch_sink = self._batch_col0 = None
            for extra in self.extras.values():
                extra.end_batch()

    def _check_rows(self, layer: int, q0: int, shape: tuple[int, ...]) -> None:
        """One shape check for both paths: rows [B,H,C,K] at query q0 must fit the batch and the trace; K ≤ T keys
        (the leading ones: causal rows of queries < q0 + C never see a later key) must include the chunk's last
        query."""
        B, H, C, K = shape
        if self._batch_sink is None:
            raise AttnlabError("call begin_batch before recording attention")
        bad_keys = not q0 + C <= K <= self.T
        if H != self.H or bad_keys or B != self._B or q0 < 0 or q0 + C > self.T or not 0 <= layer < self.L:
            raise AttnlabError(
                f"layer {layer}: attention rows {tuple(shape)} at query {q0} do not fit the trace "
                f"[{self._B},{self.H},{self.T},{self.T}] of {self.L} layers"
            )

    def _reduce_stage(self) -> None:
        """The batch's staged rows into the float64 sums, over all its layers at once: key-0 weights (and the
        per-sequence sink score and ᾱ_0), logit statistics, value norms, and their grouping by query token."""
        assert self._batch_sink is not None and self._batch_col0 is not None
        T, B = self.T, self._B
        tok = self._tokens if self.V else None
        staged = self._stage.take("key0")
        if staged is not None:
            ls, k0 = staged  # [n,B,H,T]
            lsd = ls.to(self.device)
            self.key0_sum[lsd] += k0.sum(1)
            self._batch_sink[:, lsd] = (k0[..., 1:].sum(-1) / max(T - 1, 1)).transpose(0, 1)
            self._batch_col0[:, lsd] = (k0.sum(-1) / T).transpose(0, 1)
            if self._col0_layers:  # fast fused layers: of the column sums only key 0's, Σ_b Σ_i A_i0
                pos = {layer: i for i, layer in enumerate(ls.tolist())}
                rows = torch.tensor([pos[layer] for layer in self._col0_layers], device=self.device)
                col0 = torch.tensor(self._col0_layers, device=self.device)
                self.col_sum[col0, :, 0] += k0[rows].sum(dim=(1, 3))
            if tok is not None:  # on the host: one copy of the batch's rows from an accelerator (none on the cpu)
                add_by_token(self.key0_tok_sum, ls, k0.cpu(), tok)
                self.tok_count += torch.bincount(tok.reshape(-1), minlength=self.V).to(torch.float64)
        self._reduce_logits(tok)
        staged = self._stage.take("vnorm")
        if staged is not None:
            ls, vn = staged  # [n,B,T,H]
            self.vnorm_sum[ls.to(self.device)] += vn.sum(1).transpose(-1, -2)
            self.vnorm_batches[ls] += B

    def _reduce_logits(self, tok: torch.Tensor | None) -> None:
        """The staged s_i0 and mean_{1≤j≤i−1} s_ij [n,B,H,T] into their sums, and Δ_i = s_i0 − mean grouped by query
        token (i ≥ 2)."""
        s0, rest = self._stage.take("s0"), self._stage.take("rest")
        if s0 is None or rest is None:
            return
        ls, s0v = s0
        lsd = ls.to(self.device)
        restv = rest[1]
        restv[..., :2] = float("nan")
        self.logit0_sum[lsd] += s0v.sum(1)
        self.logit_rest_sum[lsd] += restv.sum(1)
        if tok is not None and self.T > 2:
            add_by_token(self.dlogit_tok_sum, ls, (s0v - restv)[..., 2:].cpu(), tok[:, 2:])
            self.dlogit_count += torch.bincount(tok[:, 2:].reshape(-1), minlength=self.V).to(torch.float64)

    # ------------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def attention(self, layer: int, pattern: torch.Tensor, scores: torch.Tensor | None = None) -> None:
        """Reduce one layer's attention. pattern, scores: [B,H,T,T] (query, key); causal (A_ij = 0 for j > i).

        The float64 reductions run where the pattern is (a GPU, for a model there: `attention_sums`); only their
        [B,H,T]-sized results, and the patterns `keep_patterns` names, are copied to the cpu."""
        B, H, T, T2 = pattern.shape
        self._check_rows(layer, 0, (B, H, T, T2))
        if T != self.T:
            raise AttnlabError(f"layer {layer}: pattern shape {tuple(pattern.shape)} is not [B,H,{self.T},{self.T}]")
        if scores is not None and scores.shape != pattern.shape:
            raise AttnlabError(f"layer {layer}: scores shape {tuple(scores.shape)} != pattern shape {(B, H, T, T2)}")
        assert self._batch_sink is not None and self._batch_col0 is not None
        A = pattern.detach().to(torch.float64)
        S = None if scores is None else scores.detach().to(torch.float64)
        sums = {name: t.to(self.device) for name, t in attention_sums(A, S, self._i.to(A.device)).items()}
        self.attn_batches[layer] += 1
        self.attention_path(layer, "eager")  # a whole pattern: the model's own eager attention (the toy model)
        self.col_sum[layer] += sums["col_sum"]
        self.sinks.columns(layer, A.sum(2))  # [B,H,T] per sequence
        self._stage.put("key0", layer, sums["key0"])  # [B,H,T] A_i0
        self.ent_sum[layer] += sums["ent_sum"]
        self.ent_count[layer] += sums["ent_count"]
        self.empty[layer] += sums["empty"]
        if S is not None:
            self.logits(layer, sums["s0"], sums["rest"])
        for h in range(H):
            if (layer, h) in self.keep:
                self.patterns[f"{layer}.{h}"].append(A[:, h].to(torch.float32).cpu().numpy())
        for extra in self.extras.values():
            extra.attention_rows(layer, 0, pattern.detach().float())

    @torch.no_grad()
    def attention_rows(self, layer: int, q0: int, rows: torch.Tensor, scores: torch.Tensor | None = None) -> None:
        """Reduce rows q0..q0+C−1 of one layer's pattern. rows: [B,H,C,K] (query, key), causal, rows sum to ≤ 1,
        over the first K ≤ T keys (the rest are 0: K ≥ q0 + C suffices for causal rows).

        Chunks of one layer come in order and end with the chunk holding query T−1. `scores` [B,H,C,K]: the masked
        logits with rows = softmax(scores) (masked entries finite and very negative); when given, the row entropy
        is H_i = lse_i − Σ_j A_ij s_ij (one pass instead of two), with lse_i = s_ik − log A_ik at a large A_ik.
        Per chunk only what needs the whole rows is computed (column sums, Σ_j A_ij s_ij and the entries lse_i is
        read from, into per-row buffers [B,H,T]); everything per row is reduced once per layer, at its last chunk
        (few, larger operations: each small operation costs its dispatch and thread wake-up).
        """
        B, H, C, K = rows.shape
        self._check_rows(layer, q0, (B, H, C, K))
        A = rows.detach().float()
        q1 = q0 + C
        if q0 == 0:
            self.attn_batches[layer] += 1
            self._start_rows(A)
            self._seq_cols = torch.zeros(B, H, self.T, dtype=torch.float64, device=self.device)
        part = A.sum(2).double().to(self.device)  # Σ_i A_ij per sequence -> [B,H,K]
        self.col_sum[layer, :, :K] += part.sum(0)  # Σ_b Σ_i A_ij -> [H,K]
        self._seq_cols[..., :K] += part
        buf = self._rows
        buf[0, ..., q0:q1] = A[..., 0]  # A_i0
        if scores is not None:
            self._lse_entries(q0, A, scores.float())
        elif q1 > 1:
            self._row_entropy_direct(q0, A)
        self._lse_rows = scores is not None
        for h in range(H):
            if (layer, h) in self.keep:
                part = torch.zeros(B, C, self.T, dtype=torch.float32)
                part[..., :K] = A[:, h].cpu()
                self._pattern_parts.setdefault((layer, h), []).append(part)
        if q1 == self.T:
            self._end_rows(layer)
            self.sinks.columns(layer, self._seq_cols)
        for extra in self.extras.values():
            extra.attention_rows(layer, q0, A)

    def attention_path(self, layer: int, path: str) -> None:
        """Note the attention kernel layer `layer` ran (`tracing.kernels.KERNELS`: flash, cudnn, efficient, math,
        blocked, eager; flex for `stats="full"`'s second call on CUDA); a layer that ran several over the batches
        gets them joined by "+" in the order first met."""
        old = self.paths[layer].split("+") if self.paths[layer] else []
        self.paths[layer] = "+".join(old if path in old else [*old, path])

    @torch.no_grad()
    def fused_rows(
        self, layer: int, key0: torch.Tensor, entropy_sum: torch.Tensor | None = None,
        col_sum: torch.Tensor | None = None,
    ) -> None:  # fmt: skip
        """One layer of a batch from the fused path: key0 [B,H,T] = A_i0; entropy_sum [B,H] = Σ_{i≥1} H_i / log(i+1)
        of the key distribution (renormalised under a learned sink) and col_sum [B,H,T] = Σ_i A_ij, both or neither
        (`stats="full"`). Without them the layer's row entropy and column means of keys ≥ 1 come out NaN."""
        B, H, T = key0.shape
        self._check_rows(layer, 0, (B, H, T, T))
        assert self._batch_sink is not None and self._batch_col0 is not None
        self.attn_batches[layer] += 1
        self._stage.put("key0", layer, key0)
        if col_sum is None or entropy_sum is None:
            self._col0_layers.append(layer)
            self.partial_rows[layer] = True
        else:
            self.col_sum[layer] += col_sum.detach().double().to(self.device).sum(0)
            self.sinks.columns(layer, col_sum)
            if T > 1:
                self.ent_sum[layer] += entropy_sum.detach().double().to(self.device).sum(0)
                self.ent_count[layer] += B * (T - 1)

    def _start_rows(self, A: torch.Tensor) -> None:
        """The per-row buffers of one layer, [6, B, H, T] fp32 on A's device: A_i0, and for the entropy a_i, s_i
        (a large weight of row i and its score), Σ_j A_ij s_ij, the entropy itself and whether the row is empty."""
        shape = (6, A.shape[0], A.shape[1], self.T)
        if self._rows.shape != shape or self._rows.device != A.device:
            self._rows = torch.empty(shape, dtype=torch.float32, device=A.device)

    def _lse_entries(self, q0: int, A: torch.Tensor, S: torch.Tensor) -> None:
        """For rows q0.. of a chunk A, S [B,H,C,K]: the larger of A_i0 and A_ii with its score (lse_i = s_ij − log
        A_ij holds for any j whose A_ij is a normal float; the row maximum where both are below 1e-30), and
        Σ_j A_ij s_ij, written into the row buffers."""
        B, H, C, K = A.shape
        q1, buf = q0 + C, self._rows
        diag = torch.arange(q0, q1, device=A.device).clamp_max(K - 1).view(1, 1, C, 1).expand(B, H, C, 1)
        a0, ad = A[..., :1], A.gather(-1, diag)
        first = a0 >= ad
        top = torch.where(first, a0, ad)
        arg = torch.where(first, torch.zeros_like(diag), diag)
        small = top < 1e-30
        if bool(small.any()):
            mtop, marg = A.max(dim=-1, keepdim=True)
            top, arg = torch.where(small, mtop, top), torch.where(small, marg, arg)
        buf[1, ..., q0:q1] = top.squeeze(-1)
        buf[2, ..., q0:q1] = S.gather(-1, arg).squeeze(-1)
        buf[3, ..., q0:q1] = self._row_dot(A, S)

    def _row_entropy_direct(self, q0: int, A: torch.Tensor) -> None:
        """Rows of a chunk A [B,H,C,K] (no scores: moved rows or a learned sink): H(A/m) = log m − (1/m)
        Σ_j A_ij log A_ij, into the row buffers (entropy, and 1 where the row is empty)."""
        mass = A.sum(-1)  # [B,H,C]
        m = mass.clamp_min(1e-30)
        q1 = q0 + A.shape[2]
        self._rows[4, ..., q0:q1] = m.log() - torch.special.xlogy(A, A).sum(-1) / m
        self._rows[5, ..., q0:q1] = (mass <= 0).float()

    def _end_rows(self, layer: int) -> None:
        """The last chunk of a layer: per-row statistics of the whole layer from the row buffers (key-0 weights,
        the per-sequence sink score and ᾱ_0, normalised row entropies of rows i ≥ 1), and the kept patterns."""
        assert self._batch_sink is not None and self._batch_col0 is not None
        T, buf = self.T, self._rows
        self._stage.put("key0", layer, buf[0])  # [B,H,T]
        if T > 1:
            if self._lse_rows:  # H_i = lse_i − Σ_j A_ij s_ij
                ent = ((buf[2] - buf[1].log()).double() - buf[3].double())[..., 1:].to(self.device)
                nonempty = torch.ones(ent.shape, dtype=torch.bool, device=self.device)
            else:
                ent, nonempty = buf[4, ..., 1:].double().to(self.device), buf[5, ..., 1:].to(self.device) == 0
            ent = ent / torch.log(self._i[1:] + 1.0)
            zero = torch.zeros((), dtype=torch.float64, device=self.device)
            self.ent_sum[layer] += torch.where(nonempty, ent, zero).sum(dim=(0, 2))
            self.ent_count[layer] += nonempty.double().sum(dim=(0, 2))
            self.empty[layer] += (~nonempty).double().sum(dim=(0, 2))
        for h in range(self.H):
            parts = self._pattern_parts.pop((layer, h), None)
            if parts:
                self.patterns[f"{layer}.{h}"].append(torch.cat(parts, dim=1).numpy())

    def _row_dot(self, A: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
        """[B,H,C] Σ_j A_ij S_ij of A, S [B,H,C,K], the product written into a buffer kept between chunks."""
        n = A.numel()
        if self._product.numel() < n or self._product.device != A.device:
            self._product = torch.empty(n, dtype=torch.float32, device=A.device)
        return torch.mul(A, S, out=self._product[:n].view(A.shape)).sum(-1)

    @torch.no_grad()
    def learned_sink(self, layer: int, q0: int, mass: torch.Tensor) -> None:
        """mass [B,H,C]: probability on the learned sink logit (gpt-oss `sinks`) of queries q0..q0+C−1: the
        softmax runs over the keys and one extra logit per head, and the keys' weights sum to 1 − mass."""
        B, H, C = mass.shape
        if H != self.H or q0 < 0 or q0 + C > self.T or not 0 <= layer < self.L:
            raise AttnlabError(f"layer {layer}: learned-sink mass {tuple(mass.shape)} at query {q0} does not fit")
        if self.lsink_sum is None:
            self.lsink_sum = torch.zeros(self.L, self.H, self.T, dtype=torch.float64, device=self.device)
        self.lsink_sum[layer, :, q0 : q0 + C] += mass.detach().double().to(self.device).sum(0)

    @torch.no_grad()
    def logits(self, layer: int, s0: torch.Tensor, rest: torch.Tensor) -> None:
        """s0: [B,H,T] = s_i0; rest: [B,H,T] = mean_{1≤j≤i−1} s_ij (entries i < 2 are ignored). Held until the
        batch ends (`_reduce_stage`)."""
        self._check_layer_rows(layer, "logit statistics", s0.shape, (self._B, self.H, self.T))
        self._check_layer_rows(layer, "logit statistics", rest.shape, (self._B, self.H, self.T))
        self._stage.put("s0", layer, s0)
        self._stage.put("rest", layer, rest)

    @torch.no_grad()
    def value_norms(self, layer: int, norms: torch.Tensor) -> None:
        """norms: [B,T,H] = ‖W_O^h v^h_i‖ for each position and head. Held until the batch ends."""
        self._check_layer_rows(layer, "value norms", norms.shape, (self._B, self.T, self.H))
        self._stage.put("vnorm", layer, norms)

    def _check_layer_rows(self, layer: int, what: str, shape: tuple[int, ...], want: tuple[int, ...]) -> None:
        """One line when a layer's per-row statistic does not fit the batch and the trace."""
        if self._batch_sink is None:
            raise AttnlabError(f"call begin_batch before recording {what}")
        if tuple(shape) != want or not 0 <= layer < self.L:
            raise AttnlabError(f"layer {layer}: {what} shape {tuple(shape)} is not {list(want)} of {self.L} layers")

    @torch.no_grad()
    def residual(self, index: int, hidden: torch.Tensor) -> None:
        """hidden: [B,T,d] residual stream; index 0 = after the embedding, l+1 = after block l.

        Accumulates the token norms (sums float64), the median of |x| (torch.median's lower-middle convention), the
        first maximum of |x| and the massive entries, those over max(MASSIVE_ABS, MASSIVE_REL × median): on the cpu
        by `_host_stream_stats`, on an accelerator where the stream lives (`device_stream_stats`). All exact.
        """
        x = hidden.detach()
        if x.dtype in (torch.bfloat16, torch.float16):  # numpy has no bfloat16; fp32 holds both exactly
            x = x.float()
        B, T, d = x.shape
        if self.defer_streams:  # packed where x lives, read back with the batch's others (`_reduce_streams`)
            self._streams.append((index, device_stream_tensors(x, MAX_MASSIVE_ENTRIES), (B, T, d)))
        else:
            on_host = x.device.type == "cpu"
            s = self._host_stream_stats(x) if on_host else device_stream_stats(x, MASSIVE_ABS, MASSIVE_REL)
            self._add_stream(index, s, (B, T, d))
        for extra in self.extras.values():
            extra.residual(index, hidden)

    def _reduce_streams(self) -> None:
        """The batch's packed stream statistics (`defer_streams`), copied to the host in one transfer and merged
        into the accumulators in recording order, as `residual` would have merged them one by one."""
        if not self._streams:
            return
        host = torch.cat([v for _, v, _ in self._streams]).cpu()  # the batch's one synchronisation
        start = 0
        for index, v, shape in self._streams:
            n = v.numel()
            self._add_stream(index, stream_from_vector(host[start : start + n], shape[1], MASSIVE_ABS, MASSIVE_REL),
                             shape)  # fmt: skip
            start += n
        self._streams = []

    def _add_stream(self, index: int, s: StreamStats, shape: tuple[int, int, int]) -> None:
        """Merge one stream's `StreamStats` (shape (B, T, d)) into stream `index`'s accumulators."""
        B, T, d = shape
        # through numpy views of the float64 accumulators: a scalar update costs ~0.1 µs there, ~5 µs in torch
        self.resid_sum.numpy()[index] += s.norm_sum.numpy()
        for acc, add in ((self.resid_count, B), (self.median_sum, s.median), (self.median_count, 1)):
            acc.numpy()[index] += add
        if s.max_abs > self.max_abs.numpy()[index]:
            self.max_abs.numpy()[index] = s.max_abs
            self.max_pos.numpy()[index] = (s.flat // d) % T
            self.max_dim.numpy()[index] = s.flat % d
        if s.idx.size:
            self._add_massive(index, s.idx, s.values, (T, d), s.median)

    def _host_stream_stats(self, x: torch.Tensor) -> StreamStats:
        """`StreamStats` of a float stream x [B,T,d] on the cpu. The token norms run in x's precision (one fused
        `vector_norm` reduction); |x| is one torch pass into a scratch buffer kept between calls (no fresh pages per
        stream); the maximum and, only when it exceeds MASSIVE_ABS, the entries over MASSIVE_ABS are read first,
        then the median is selected in place (`lower_median`). numpy's vectorised passes do the order statistics
        (torch's argmax and top-k on a [B,T,d] stream cost 10-40× more). Where numba is installed, one fused pass
        (`tracing.fast.stream_stats`) gives the same numbers instead (the norms summed in float64)."""
        fused = cpu_stream_stats(x, MASSIVE_ABS, MASSIVE_REL)
        if fused is not None:
            return fused
        norms = torch.linalg.vector_norm(x, dim=-1).double().sum(0)
        ax = self._abs_scratch(x)
        flat = int(np.argmax(ax))  # the first maximum
        m = float(ax[flat])
        # the massive entries' candidates, in index order: few, and none to look for where the maximum is small
        cand = np.flatnonzero(ax > MASSIVE_ABS) if m > MASSIVE_ABS else np.zeros(0, dtype=np.int64)
        if self._median_method is None:
            self._median_method = faster_method(ax)
        med = lower_median(ax, in_place=True, method=self._median_method)  # the scratch's order is lost here
        values = x.reshape(-1).numpy()[cand]
        over = np.abs(values) > max(MASSIVE_ABS, MASSIVE_REL * med)
        return StreamStats(norms, flat, m, med, cand[over], values[over])

    def _abs_scratch(self, x: torch.Tensor) -> np.ndarray:
        """|x| of the float stream x [B,T,d], flattened, written into the recorder's scratch buffer (numpy view)."""
        n = x.numel()
        if self._scratch.numel() < n or self._scratch.dtype != x.dtype:
            self._scratch = torch.empty(n, dtype=x.dtype)
        out = self._scratch[:n]
        torch.abs(x.reshape(-1), out=out)  # torch's abs runs on the intra-op threads (numpy's on one)
        return out.numpy()

    def _add_massive(self, index: int, idx: np.ndarray, values: np.ndarray, shape: tuple[int, int], med: float) -> None:
        """Keep the largest `MAX_MASSIVE_ENTRIES` of the entries over the threshold, flat indices `idx` into the
        [B,T,d] stream with their `values`, for stream `index` (shape = (T, d)), merged with earlier batches' (the
        largest by magnitude when more than the cap; ties in index order)."""
        T, d = shape
        mag = np.abs(values)
        if idx.size > MAX_MASSIVE_ENTRIES:
            keep = np.argpartition(-mag, MAX_MASSIVE_ENTRIES - 1)[:MAX_MASSIVE_ENTRIES]
            idx, values, mag = idx[keep], values[keep], mag[keep]
        order = np.lexsort((idx, -mag))  # largest first; ties in index order
        for i, v in zip(idx[order].tolist(), values[order].tolist()):
            b, rest = divmod(i, T * d)
            t, dim = divmod(rest, d)
            self.massive[index].append(
                {"layer": index, "sample": self.n_seq + b, "pos": t, "dim": dim, "value": float(v), "median_abs": med}
            )
        self.massive[index] = sorted(self.massive[index], key=lambda r: -abs(r["value"]))[:MAX_MASSIVE_ENTRIES]

    # ------------------------------------------------------------------------------------------------------
    def extra_results(self) -> dict[str, Any]:
        """{name: extra.result()} of the `extras`, once every batch begun is complete."""
        self._flush_batch()
        return {name: extra.result() for name, extra in self.extras.items()}

    def _host_sums(self) -> dict[str, torch.Tensor]:
        """{name: the accumulator on the host}: the tensors themselves on the cpu, else one copy each."""
        names = ("tok_count", "dlogit_count", "key0_sum", "key0_tok_sum", "logit0_sum", "logit_rest_sum",
                 "dlogit_tok_sum", "ent_sum", "ent_count", "empty", "vnorm_sum")  # fmt: skip
        return {k: getattr(self, k).cpu() for k in names}

    def result(self) -> Trace:
        """Divide sums by counts and return the `Trace`."""
        self._flush_batch()
        if self.n_seq == 0:
            raise AttnlabError("the trace recorded no sequences")
        n = float(self.n_seq)
        col_count = (self.T - self._i) * n  # queries that see key j
        partial = self.partial_rows.numpy()
        host = self._host_sums()  # one copy of each device accumulator (none on the cpu)
        with np.errstate(invalid="ignore", divide="ignore"):
            tok_c = host["tok_count"].numpy()
            dl_c = host["dlogit_count"].numpy()
            trace = Trace(
                attn_col_mean=(self.col_sum / col_count).cpu().numpy(),
                attn_key0_by_query=(host["key0_sum"] / n).numpy(),
                attn_key0_by_token=by_token(host["key0_tok_sum"], tok_c),
                token_count=tok_c.copy(),
                logit_key0=(host["logit0_sum"] / n).numpy(),
                logit_rest=(host["logit_rest_sum"] / n).numpy(),
                dlogit_by_query=((host["logit0_sum"] - host["logit_rest_sum"]) / n).numpy(),
                dlogit_by_token=by_token(host["dlogit_tok_sum"], dl_c),
                dlogit_count=dl_c.copy(),
                row_entropy=(host["ent_sum"] / host["ent_count"]).numpy(),
                empty_rows=host["empty"].numpy().copy(),
                value_norm=(host["vnorm_sum"] / self.vnorm_batches.clamp_min(1)[:, None, None]).numpy(),
                resid_norm=(self.resid_sum / self.resid_count.clamp_min(1)[:, None]).numpy(),
                max_abs=self.max_abs.numpy().copy(),
                max_pos=self.max_pos.numpy().copy(),
                max_dim=self.max_dim.numpy().copy(),
                median_abs=(self.median_sum / self.median_count.clamp_min(1)).numpy(),
                sink_score_per_sample=torch.cat(self.sink_per_sample).numpy(),
                key0_col_mean_per_sample=torch.cat(self.col0_per_sample).numpy(),
                massive=[r for rows in self.massive for r in rows],
                patterns={k: np.concatenate(v) for k, v in self.patterns.items() if v},
                learned_sink_by_query=None if self.lsink_sum is None else (self.lsink_sum / n).cpu().numpy(),
                attention_paths=list(self.paths),
                sink_record=self.sinks.result() if self.sinks.checked.all() else None,
                host_kernels="numba" if kernels_available() else "torch",
            )
        trace.attn_col_mean[partial, :, 1:] = np.nan  # not computed on the fast fused path
        trace.row_entropy[partial] = np.nan
        if not self.V:
            trace.attn_key0_by_token = np.zeros((self.L, self.H, 0))
            trace.dlogit_by_token = np.zeros((self.L, self.H, 0))
            trace.token_count = np.zeros(0)
            trace.dlogit_count = np.zeros(0)
        return trace
