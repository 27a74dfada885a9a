"""Secondary attention sinks (issue 41, spec extreme-tokens §13.14): every key j ≥ 1 that acts as a sink in a head.

Per sequence (window), layer l and head h, from the per-sequence column sums of the full-row statistics:

    M^{l,h}_j = (1/(T−j)) Σ_{i≥j} A^{l,h}_{ij}                        (received attention: mean over the queries
                                                                         that can see key j; causal A_ij = 0, i < j)
    key j is a sink of head (l, h)  ⇔  j ≥ 1, T − j ≥ MIN_QUERIES and M^{l,h}_j ≥ τ   (τ = 0.3, R24's threshold)

A sink token (sequence, j) has its first layer l_f (the smallest l where it is a sink in some head), its lifetime
(the number of consecutive layers l_f, l_f+1, ... in which it stays a sink in some head), its peak score
max_{l,h} M^{l,h}_j, and, for every layer l, the ℓ2 norm of the MLP's output at j and the cosine between that output
and the residual stream at position 0 entering block l (the primary sink's direction as layer l reads it). The
forming MLP is that of block l_f − 1, the last MLP to write position j's residual before the attention of layer l_f
reads its key (NaN for l_f = 0: the embedding forms it).

Decision (docs/real-models.md §13.14): MIN_QUERIES = 32. The mean over few queries is noise: the last key's M is
the last query's own weight A_{T−1,T−1}, often above τ in a local head, which would make every window "have" a
secondary sink. With 32 queries a sink needs at least ~10 queries' worth of full attention.

`SinkCollector` gathers the hits as the recorder sees each layer (O(hits) memory, nothing per key kept across
batches beyond the MLP's [B,L,T] norms of the batch in flight); `SinkRecord` is what a `Trace` holds, saved with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

TAU = 0.3  # the authors' sink procedure's threshold (R24, `attnlab.scan.sinkproc.THRESHOLD`)
MIN_QUERIES = 32  # a key is judged only when at least this many queries see it (module docstring)
HIT_COLUMNS = ("sample", "pos", "layer", "head", "score")


@dataclass
class SinkRecord:
    """The secondary sinks of a trace. hits [n,5] float64 (sample, pos, layer, head, score M); tokens [m,3]
    (sample, pos, token id or −1) of every sink token; mlp_norm, mlp_cos [m,L] (NaN where no MLP was hooked);
    checked [L] bool: layers whose per-sequence column sums existed; tau, min_queries: the rule."""

    hits: np.ndarray
    tokens: np.ndarray
    mlp_norm: np.ndarray
    mlp_cos: np.ndarray
    checked: np.ndarray
    tau: float = TAU
    min_queries: int = MIN_QUERIES

    def arrays(self) -> dict[str, np.ndarray]:
        """The record as named float64 arrays (for safetensors), the rule in `sinks.rule` [2]."""
        return {
            "sinks.hits": self.hits,
            "sinks.tokens": self.tokens,
            "sinks.mlp_norm": self.mlp_norm,
            "sinks.mlp_cos": self.mlp_cos,
            "sinks.checked": self.checked.astype(np.float64),
            "sinks.rule": np.array([self.tau, self.min_queries], dtype=np.float64),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> SinkRecord | None:
        """The record back from `arrays()`'s names; None where the file has none."""
        if "sinks.hits" not in arrays:
            return None
        rule = arrays["sinks.rule"]
        return cls(arrays["sinks.hits"].reshape(-1, 5), arrays["sinks.tokens"].reshape(-1, 3),
                   arrays["sinks.mlp_norm"], arrays["sinks.mlp_cos"], arrays["sinks.checked"] > 0,
                   float(rule[0]), int(rule[1]))  # fmt: skip

    def levels(self) -> Any:
        """DataFrame, one row per (sample, pos, layer) where the token is a sink: `score` (max over heads of M),
        `heads` (space-separated heads with M ≥ τ), `n_heads`, `token`."""
        import pandas as pd

        cols = ["sample", "pos", "token", "layer", "score", "n_heads", "heads"]
        if not len(self.hits):
            return pd.DataFrame({c: pd.Series(dtype=float) for c in cols})
        h = pd.DataFrame(self.hits, columns=list(HIT_COLUMNS)).astype({c: int for c in HIT_COLUMNS[:4]})
        g = h.sort_values("head").groupby(["sample", "pos", "layer"], sort=True)
        out = g.agg(score=("score", "max"), n_heads=("head", "size"),
                    heads=("head", lambda s: " ".join(str(int(x)) for x in s))).reset_index()  # fmt: skip
        tok = {(int(s), int(p)): int(t) for s, p, t in self.tokens}
        out["token"] = [tok.get((s, p), -1) for s, p in zip(out["sample"], out["pos"])]
        return out[cols]

    def table(self) -> Any:
        """DataFrame, one row per sink token (sample, pos): `token`, `first_layer`, `lifetime` (consecutive layers
        from the first), `n_layers` (all its sink layers), `layers`, `heads` ("l.h" list), `score` (peak M),
        `score_first` (max over heads at the first layer), `forming_layer` (first − 1), `forming_mlp_norm`,
        `forming_mlp_cos`, then `mlp_norm_{l}` and `mlp_cos_{l}` for every layer l."""
        import pandas as pd

        L = self.mlp_norm.shape[1] if self.mlp_norm.ndim == 2 else int(self.checked.size)
        lv = self.levels()
        rows = [self._token_row(i, lv, L) for i in range(len(self.tokens))]
        base = ["sample", "pos", "token", "first_layer", "lifetime", "n_layers", "layers", "heads", "score",
                "score_first", "forming_layer", "forming_mlp_norm", "forming_mlp_cos"]  # fmt: skip
        cols = base + [f"mlp_norm_{l}" for l in range(L)] + [f"mlp_cos_{l}" for l in range(L)]
        return pd.DataFrame(rows, columns=cols)

    def _token_row(self, i: int, lv: Any, L: int) -> dict[str, Any]:
        """One sink token's row of `table` (index i into `tokens`)."""
        s, p, t = (int(x) for x in self.tokens[i])
        mine = lv[(lv["sample"] == s) & (lv["pos"] == p)]
        layers = sorted(int(x) for x in mine["layer"])
        first = layers[0]
        hits = self.hits[(self.hits[:, 0] == s) & (self.hits[:, 1] == p)]
        forming = first - 1
        row: dict[str, Any] = {
            "sample": s, "pos": p, "token": t, "first_layer": first, "lifetime": lifetime(layers),
            "n_layers": len(layers), "layers": " ".join(map(str, layers)),
            "heads": " ".join(f"{int(a)}.{int(b)}" for a, b in sorted(map(tuple, hits[:, 2:4].tolist()))),
            "score": float(hits[:, 4].max()), "score_first": float(mine["score"].iloc[0]),
            "forming_layer": forming,
            "forming_mlp_norm": float(self.mlp_norm[i, forming]) if forming >= 0 else float("nan"),
            "forming_mlp_cos": float(self.mlp_cos[i, forming]) if forming >= 0 else float("nan"),
        }  # fmt: skip
        row.update({f"mlp_norm_{l}": float(self.mlp_norm[i, l]) for l in range(L)})
        row.update({f"mlp_cos_{l}": float(self.mlp_cos[i, l]) for l in range(L)})
        return row


def lifetime(layers: list[int]) -> int:
    """The number of consecutive layers from the first of `layers` (sorted, distinct): [3, 4, 5, 8] -> 3."""
    n = 0
    for k, layer in enumerate(layers):
        if layer != layers[0] + k:
            break
        n += 1
    return n


def sink_hits(col_sum: np.ndarray, tau: float = TAU, min_queries: int = MIN_QUERIES) -> np.ndarray:
    """[n,4] (b, head, pos, score) of the entries M_j = col_sum[b,h,j] / (T−j) ≥ tau with j ≥ 1 and T − j ≥
    min_queries. col_sum: [B,H,T] per-sequence column sums Σ_{i≥j} A_ij of one layer."""
    T = col_sum.shape[-1]
    j = np.arange(T)
    M = col_sum / (T - j)
    ok = (j >= 1) & (T - j >= min_queries)
    b, h, p = np.nonzero((M >= tau) & ok)
    return np.stack([b, h, p, M[b, h, p]], axis=1).astype(np.float64) if b.size else np.zeros((0, 4))


class SinkCollector:
    """Secondary sinks as a recorder meets them (module docstring): `begin_batch`, per layer `columns` (the
    per-sequence column sums) and `mlp` (the MLP output's norms and cosines), `end_batch`, then `result()`."""

    def __init__(self, n_layers: int, seq_len: int, tau: float = TAU, min_queries: int = MIN_QUERIES) -> None:
        self.L, self.T, self.tau, self.min_queries = n_layers, seq_len, tau, min_queries
        self.checked = np.zeros(n_layers, dtype=bool)
        self._hits: list[np.ndarray] = []  # [n,5] (sample, pos, layer, head, score)
        self._tokens: list[np.ndarray] = []
        self._norm: list[np.ndarray] = []
        self._cos: list[np.ndarray] = []
        self._batch: list[np.ndarray] = []
        self._bnorm = self._bcos = np.zeros((0, n_layers, seq_len))
        self._n0 = 0
        self._ids: np.ndarray | None = None

    def begin_batch(self, batch: int, first_sample: int, tokens: torch.Tensor | None) -> None:
        """A batch of `batch` sequences numbered from `first_sample`; tokens [B,T] or None."""
        self._n0, self._batch = first_sample, []
        self._ids = None if tokens is None else tokens.detach().cpu().numpy()
        self._bnorm = np.full((batch, self.L, self.T), np.nan)
        self._bcos = np.full((batch, self.L, self.T), np.nan)

    def set_tokens(self, tokens: torch.Tensor) -> None:
        """The batch's token ids [B,T] (named in the table) where the recorder groups none."""
        self._ids = tokens.detach().cpu().numpy()

    def columns(self, layer: int, col_sum: torch.Tensor) -> None:
        """col_sum [B,H,T]: Σ_i A_ij of layer `layer` for each sequence of the batch."""
        self.checked[layer] = True
        h = sink_hits(col_sum.detach().double().cpu().numpy(), self.tau, self.min_queries)
        if len(h):
            self._batch.append(np.column_stack([h[:, 0], h[:, 2], np.full(len(h), layer), h[:, 1], h[:, 3]]))

    def mlp(self, layer: int, out: torch.Tensor, resid0: torch.Tensor) -> None:
        """out [B,T,d]: the MLP output of block `layer`; resid0 [B,d]: the residual at position 0 entering the
        block (a family that flattens the tokens, OPT, gives [B·T,d]). Keeps ‖out_j‖ and cos(out_j, resid0) [B,T]
        in float64 for the batch."""
        r = resid0.detach().double()
        o = out.detach().double().reshape(r.shape[0], -1, r.shape[-1])
        norm = torch.linalg.vector_norm(o, dim=-1)  # [B,T]
        cos = (o @ r.unsqueeze(-1)).squeeze(-1) / (norm * torch.linalg.vector_norm(r, dim=-1, keepdim=True))
        self._bnorm[:, layer] = norm.cpu().numpy()
        self._bcos[:, layer] = cos.cpu().numpy()

    def end_batch(self) -> None:
        """The batch's hits numbered by sample, and each sink token's MLP norms and cosines over the layers."""
        if not self._batch:
            return
        hits = np.concatenate(self._batch)
        pairs = np.unique(hits[:, :2].astype(np.int64), axis=0)  # (b, pos) of every sink token
        b, p = pairs[:, 0], pairs[:, 1]
        tok = self._ids[b, p] if self._ids is not None else np.full(len(b), -1)
        hits[:, 0] += self._n0
        self._hits.append(hits)
        self._tokens.append(np.column_stack([b + self._n0, p, tok]).astype(np.float64))
        self._norm.append(self._bnorm[b, :, p])
        self._cos.append(self._bcos[b, :, p])
        self._batch = []

    def result(self) -> SinkRecord:
        """Every batch's hits and sink tokens (tokens sorted by sample, then position)."""
        L = self.L
        hits = np.concatenate(self._hits) if self._hits else np.zeros((0, 5))
        return SinkRecord(
            hits=hits,
            tokens=np.concatenate(self._tokens) if self._tokens else np.zeros((0, 3)),
            mlp_norm=np.concatenate(self._norm) if self._norm else np.zeros((0, L)),
            mlp_cos=np.concatenate(self._cos) if self._cos else np.zeros((0, L)),
            checked=self.checked.copy(),
            tau=self.tau,
            min_queries=self.min_queries,
        )
