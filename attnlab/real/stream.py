"""`StreamingRecorder`: the shared `TraceRecorder`, fed by query chunks instead of whole [B,H,T,T] patterns.

The shared recorder's `attention(layer, pattern, scores)` needs the full pattern of a layer in float64. Real-model
scans call, per layer, `attention_rows(layer, q0, rows)` for consecutive query chunks rows = A[:, :, q0:q1, :]
(fp32, reduced in fp32 and accumulated in float64), then `logits(layer, s0, rest)` with the two logit statistics
of spec §5 computed from q and k directly (O(T·d_h), no T² tensor). Results land in the recorder's own
accumulators, so `result()` returns the same `Trace` as the whole-pattern path (tested to 1e-6).
"""

from __future__ import annotations

import torch

from attnlab.errors import AttnlabError
from attnlab.trace.recorder import TraceRecorder


class StreamingRecorder(TraceRecorder):
    """`TraceRecorder` with chunked attention reducers; arguments as `TraceRecorder`."""

    def begin_batch(self, tokens: torch.Tensor | None, batch_size: int | None = None) -> None:
        super().begin_batch(tokens, batch_size)
        self._acc_sink = torch.zeros(self._B, self.L, self.H, dtype=torch.float64)
        self._acc_col0 = torch.zeros(self._B, self.L, self.H, dtype=torch.float64)
        self._pattern_parts: dict[tuple[int, int], list[torch.Tensor]] = {}

    @torch.no_grad()
    def attention_rows(self, layer: int, q0: int, rows: torch.Tensor, scores: torch.Tensor | None = None) -> None:
        """Reduce rows q0..q0+C−1 of one layer's pattern. rows: [B,H,C,T] (query, key), causal, rows sum to ≤ 1.

        `scores` [B,H,C,T]: the masked logits with rows = softmax(scores) (masked entries finite and very
        negative); when given, the row entropy is computed as H_i = lse_i − Σ_j A_ij s_ij, one pass instead of
        two, with lse_i = s_ik − log A_ik at the row's largest weight k.
        """
        B, H, C, T = rows.shape
        if (H, T) != (self.H, self.T) or B != self._B or q0 < 0 or q0 + C > T:
            raise AttnlabError(f"layer {layer}: chunk {tuple(rows.shape)} at query {q0} does not fit the trace "
                               f"[{self._B},{self.H},{self.T},{self.T}]")
        A = rows.detach().float()
        q1 = q0 + C
        if q0 == 0:
            self.attn_batches[layer] += 1
        self.col_sum[layer] += A.sum(dim=(0, 2)).double()                       # Σ_b Σ_i A_ij -> [H,T]
        key0 = A[..., 0]                                                          # [B,H,C]
        self.key0_sum[layer, :, q0:q1] += key0.double().sum(0)
        self._acc_col0[:, layer] += key0.double().sum(-1)
        first = max(1, q0) - q0                                                   # skip query 0 for the sink score
        self._acc_sink[:, layer] += key0[..., first:].double().sum(-1)
        tok = self._tokens
        if tok is not None and self.V:
            idx = tok[:, q0:q1].unsqueeze(1).expand(B, H, C)
            s = torch.zeros(B, H, self.V, dtype=torch.float64).scatter_add_(2, idx, key0.double())
            self.key0_tok_sum[layer] += s.sum(0)
            if layer == 0:
                self.tok_count += torch.bincount(tok[:, q0:q1].reshape(-1), minlength=self.V).double()
        # Row entropy of rows i ≥ 1, renormalised: H(A/m) = log m − (1/m) Σ_j A_ij log A_ij, divided by log(i+1).
        if q1 > 1:
            R = A[:, :, first:, :]
            if scores is not None:                       # whole contiguous chunk (no copies), then drop row 0
                S = scores.float()
                # lse_i = s_ij − log A_ij holds for any j with A_ij a normal float; use j = 0 or j = i (the larger),
                # and the row maximum only for rows where both are below 1e-30.
                diag = torch.arange(q0, q1).clamp_max(T - 1).view(1, 1, C, 1).expand(B, H, C, 1)
                a0, ad = A[..., :1], A.gather(-1, diag)
                arg = torch.where(a0 >= ad, torch.zeros_like(diag), diag)
                top = torch.maximum(a0, ad)
                small = top < 1e-30
                if bool(small.any()):
                    mtop, marg = A.max(dim=-1, keepdim=True)
                    top, arg = torch.where(small, mtop, top), torch.where(small, marg, arg)
                lse = S.gather(-1, arg).squeeze(-1) - top.squeeze(-1).log()
                ent = (lse.double() - torch.einsum("bhij,bhij->bhi", A, S).double())[:, :, first:]
                nonempty = torch.ones(ent.shape, dtype=torch.bool)
            else:
                mass = R.sum(-1)                                                  # [B,H,C']
                nonempty = mass > 0
                m = mass.clamp_min(1e-30)
                ent = (m.log() - torch.special.xlogy(R, R).sum(-1) / m).double()
            pos = torch.arange(q0 + first, q1, dtype=torch.float64)
            ent = ent / torch.log(pos + 1.0)
            self.ent_sum[layer] += torch.where(nonempty, ent, torch.zeros((), dtype=torch.float64)).sum(dim=(0, 2))
            self.ent_count[layer] += nonempty.double().sum(dim=(0, 2))
            self.empty[layer] += (~nonempty).double().sum(dim=(0, 2))
        for h in range(H):
            if (layer, h) in self.keep:
                self._pattern_parts.setdefault((layer, h), []).append(A[:, h].clone())
        if q1 == T:
            self._batch_sink[:, layer] = self._acc_sink[:, layer] / max(T - 1, 1)
            self._batch_col0[:, layer] = self._acc_col0[:, layer] / T
            for h in range(H):
                parts = self._pattern_parts.pop((layer, h), None)
                if parts:
                    self.patterns[f"{layer}.{h}"].append(torch.cat(parts, dim=1).numpy())

    @torch.no_grad()
    def logits(self, layer: int, s0: torch.Tensor, rest: torch.Tensor) -> None:
        """s0: [B,H,T] = s_i0; rest: [B,H,T] = mean_{1≤j≤i−1} s_ij (entries i < 2 are ignored)."""
        B, H, T = s0.shape
        s0 = s0.detach().double()
        rest = rest.detach().double().clone()
        rest[..., :2] = float("nan")
        self.logit0_sum[layer] += s0.sum(0)
        self.logit_rest_sum[layer] += rest.sum(0)
        tok = self._tokens
        if tok is not None and self.V and T > 2:
            d = (s0 - rest)[..., 2:]
            idx = tok[:, 2:].unsqueeze(1).expand(B, H, T - 2)
            s = torch.zeros(B, H, self.V, dtype=torch.float64).scatter_add_(2, idx, d)
            self.dlogit_tok_sum[layer] += s.sum(0)
            if layer == 0:
                self.dlogit_count += torch.bincount(tok[:, 2:].reshape(-1), minlength=self.V).double()
