"""The `Trace`: reduced attention statistics of one model over a set of sequences (spec extreme-tokens §5).

All arrays are float64 numpy. L = layers, H = heads, T = sequence length, V = vocabulary size (0 if tokens
were not grouped), N = number of sequences.

| field | shape | meaning |
|---|---|---|
| attn_col_mean | [L,H,T] | ᾱ_j = mean over queries i ≥ j (that can see key j) of A_ij |
| attn_key0_by_query | [L,H,T] | mean over sequences of A_i0, per query position i |
| attn_key0_by_token, token_count | [L,H,V], [V] | mean of A_i0 grouped by the query's token |
| logit_key0, logit_rest | [L,H,T] | mean s_i0; mean of (1/(i-1)) Σ_{1≤j≤i-1} s_ij (NaN for i < 2) |
| dlogit_by_query | [L,H,T] | mean Δ_i = s_i0 − logit_rest_i (NaN for i < 2) |
| dlogit_by_token, dlogit_count | [L,H,V], [V] | Δ_i grouped by query token, i ≥ 2 |
| row_entropy | [L,H] | mean over rows i ≥ 1 of H(A_i·/ΣA_i·)/log(i+1); empty rows skipped |
| empty_rows | [L,H] | number of all-zero rows skipped (ReLU attention) |
| value_norm | [L,H,T] | mean ‖W_O^h v^h_i‖ per position |
| resid_norm | [R,T] | mean ‖x_i‖ per position; R = L+1 (embedding output, then after each block) |
| max_abs, max_pos, max_dim, median_abs | [R] | largest |x| in each residual, where, and the median |x| |
| sink_score_per_sample | [N,L,H] | (1/(T−1)) Σ_{i≥1} A_i0 for each sequence |
| key0_col_mean_per_sample | [N,L,H] | ᾱ_0 = (1/T) Σ_{i≥0} A_i0 for each sequence (Sink_k^ε of Gu et al.) |
| massive | DataFrame | entries |x| > 100 and > 1000 × median: layer, sample, pos, dim, value, median_abs |
| patterns | {"l.h": [N,T,T]} | full attention patterns, only for heads asked for |
| learned_sink_by_query | [L,H,T] or None | mean mass on the learned sink logit per query (gpt-oss `sinks`) |
| attention_paths | [L] str | the kernel each layer ran (`tracing.kernels`): flash, cudnn, efficient, blocked, eager |
| sink_record | SinkRecord or None | secondary sinks (`tracing.sinks`; tables `secondary_sinks`, `sink_levels`) |
| host_kernels | str | the cpu reductions' code: "numba" (`attnlab[fast]`'s kernels) or "torch" (no numba) |

`attention_paths`: several kernels over the batches are joined by "+", and "+flex" follows the output's kernel
where `stats="full"`'s second call ran through FlexAttention (CUDA); "" in old files; "math" (sdpa's T×T fallback)
is never run by a trace. `sink_record`: keys j ≥ 1 with M_j ≥ 0.3 in a head, per sequence; None unless every layer
had full rows (`stats="full"` or "chunked", the toy model).

On the default fused path (`stats="fast"`) the row entropy and ᾱ_j for keys j ≥ 1 are not computed: they are NaN
in the layers that took it (`stats="full"` computes them; docs/real-models.md).

Under a sliding window of W keys, A_i0 = 0 for queries i ≥ W: the sink score and ᾱ_0 keep their definitions (means
over every query, so a windowed head's key-0 statistics are bounded by the share of queries that can still see key
0); logit_key0 / logit_rest are *pre-mask* logits (after soft-capping), what key 0 would score if it were visible;
the row entropy stays normalised by log(i+1). With learned sinks the weights on the keys sum to 1 − (sink mass);
the row entropy is that of the renormalised key distribution (docs/real-models.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.errors import InputError
from attnlab.tracing.sinks import SinkRecord

ARRAY_FIELDS = (
    "attn_col_mean",
    "attn_key0_by_query",
    "attn_key0_by_token",
    "token_count",
    "logit_key0",
    "logit_rest",
    "dlogit_by_query",
    "dlogit_by_token",
    "dlogit_count",
    "row_entropy",
    "empty_rows",
    "value_norm",
    "resid_norm",
    "max_abs",
    "max_pos",
    "max_dim",
    "median_abs",
    "sink_score_per_sample",
    "key0_col_mean_per_sample",
)


MASSIVE_COLUMNS = {"layer": "int64", "sample": "int64", "pos": "int64", "dim": "int64", "value": "float64",
                   "median_abs": "float64"}  # fmt: skip


def massive_frame(rows: Any) -> Any:
    """`Trace.massive` as a DataFrame with MASSIVE_COLUMNS (their dtypes; extra columns kept after them) from a list
    of dicts (the recorder's and older files' form) or a DataFrame. Built column by column, each array made in its
    dtype once (pandas' records path, then a cast and a reindex per column, took ~3 ms of every trace)."""
    import pandas as pd

    if isinstance(rows, pd.DataFrame):
        cols = {c: rows[c].to_numpy() for c in rows.columns}
    else:
        rows = list(rows)
        cols = {k: [r.get(k) for r in rows] for k in dict.fromkeys(k for r in rows for k in r)}
    n = len(rows)
    missing = np.full(n, np.nan) if n else None  # a column an older file lacks: NaN (float), as pandas aligns it
    typed = {c: np.asarray(cols[c], dtype=t) if c in cols else np.zeros(0, t) if missing is None else missing
             for c, t in MASSIVE_COLUMNS.items()}  # fmt: skip
    return pd.DataFrame({**typed, **{c: v for c, v in cols.items() if c not in MASSIVE_COLUMNS}})


def massive_records(frame: Any) -> list[dict]:
    """The list of dicts (plain Python numbers) that `save` writes for `Trace.massive`."""
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()} for row in frame.to_dict("records")]


class Patterns(dict):
    """{"l.h": [N, query, key]} that also answers `patterns[(l, h)]`."""

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, tuple):
            key = f"{int(key[0])}.{int(key[1])}"
        try:
            return super().__getitem__(key)
        except KeyError:
            raise KeyError(f"no pattern kept for head {key}; kept: {sorted(self)} (use keep_patterns=)") from None

    def __contains__(self, key: object) -> bool:
        if isinstance(key, tuple):
            key = f"{int(key[0])}.{int(key[1])}"
        return super().__contains__(key)


@dataclass
class Trace:
    attn_col_mean: np.ndarray
    attn_key0_by_query: np.ndarray
    attn_key0_by_token: np.ndarray
    token_count: np.ndarray
    logit_key0: np.ndarray
    logit_rest: np.ndarray
    dlogit_by_query: np.ndarray
    dlogit_by_token: np.ndarray
    dlogit_count: np.ndarray
    row_entropy: np.ndarray
    empty_rows: np.ndarray
    value_norm: np.ndarray
    resid_norm: np.ndarray
    max_abs: np.ndarray
    max_pos: np.ndarray
    max_dim: np.ndarray
    median_abs: np.ndarray
    sink_score_per_sample: np.ndarray
    key0_col_mean_per_sample: np.ndarray
    massive: Any = field(default_factory=list)  # a DataFrame (MASSIVE_COLUMNS); a list of dicts is converted
    patterns: dict = field(default_factory=dict)
    learned_sink_by_query: np.ndarray | None = None
    logits: np.ndarray | None = None  # [N,T,V] float32, only when `attnlab.trace(..., logits=True)`
    attention_paths: list = field(default_factory=list)  # [L] the kernel each layer ran ("flash", "blocked", ...)
    sink_record: SinkRecord | None = None  # secondary sinks (`secondary_sinks`), under full-row statistics only
    host_kernels: str = ""  # "numba" or "torch": which code reduced the statistics on the cpu ("" in old files)
    # point -> the activation cached there by `attnlab.trace(..., cache=...)`, a torch tensor on the device it was
    # computed on (in memory only: `save` does not write it)
    cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # `attnlab.trace(..., grad=True)` only: {"sink_score", "key0_col_mean", "row_entropy": [N,L,H], "attn_col_mean":
    # [N,L,H,T]} torch tensors that keep the graph (`adapters.hooked.differentiable_stats`; in memory only)
    grad_stats: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.massive = massive_frame(self.massive)
        if not isinstance(self.patterns, Patterns):
            self.patterns = Patterns(self.patterns)

    # ---- typed tables -----------------------------------------------------------------------------------
    @property
    def heads(self) -> Any:
        """DataFrame, one row per (layer, head): `sink_score` (mean A_i0 over queries 1..T−1), `mean_attn_key0`
        (ᾱ_0), `row_entropy`, `value_norm_key0` (‖W_O^h v_0‖), `value_norm_ratio` (over the median of i ≥ 1),
        `dlogit_mean` (mean Δ_i over i ≥ 2), `empty_rows`, and `learned_sink_mass` when the model has sinks."""
        import pandas as pd

        L, H = self.n_layers, self.n_heads
        cols: dict[str, Any] = {
            "layer": np.repeat(np.arange(L), H),
            "head": np.tile(np.arange(H), L),
            "sink_score": self.sink_score().ravel(),
            "mean_attn_key0": self.mean_attn_score_key0().ravel(),
            "row_entropy": self.row_entropy.ravel(),
            "value_norm_key0": self.value_norm[..., 0].ravel(),
            "value_norm_ratio": self.value_norm_ratio().ravel(),
            "dlogit_mean": np.nanmean(self.dlogit_by_query[..., 2:], axis=-1).ravel() if self.seq_len > 2 else np.nan,
            "empty_rows": self.empty_rows.ravel(),
        }
        sink_mass = self.learned_sink_mass()
        if sink_mass is not None:
            cols["learned_sink_mass"] = sink_mass.ravel()
        return pd.DataFrame(cols)

    @property
    def residuals(self) -> Any:
        """DataFrame, one row per residual stream (`layer` 0 = embedding output, l = after block l−1): `max_abs`
        and where (`max_pos`, `max_dim`), `median_abs`, `norm_key0` (‖x_0‖) and `norm_ratio` (over the median)."""
        import pandas as pd

        return pd.DataFrame(
            {
                "layer": np.arange(self.resid_norm.shape[0]),
                "max_abs": self.max_abs,
                "max_pos": self.max_pos.astype(int),
                "max_dim": self.max_dim.astype(int),
                "median_abs": self.median_abs,
                "norm_key0": self.resid_norm[:, 0],
                "norm_ratio": self.resid_norm_ratio(),
            }
        )

    @property
    def secondary_sinks(self) -> Any:
        """DataFrame, one row per secondary sink token (sequence `sample`, key `pos` ≥ 1): its first layer, lifetime,
        heads, scores M_j = Σ_i A_ij / (T−j) and every layer's MLP output norm and cosine with position 0's residual
        (`SinkRecord.table`, `tracing.sinks`); None when the trace had no full-row statistics (`stats="fast"`)."""
        return None if self.sink_record is None else self.sink_record.table()

    @property
    def sink_levels(self) -> Any:
        """DataFrame, one row per (sample, pos, layer) where the token is a sink: its score (max over heads of M_j)
        and heads (`SinkRecord.levels`); None as `secondary_sinks`."""
        return None if self.sink_record is None else self.sink_record.levels()

    @property
    def n_layers(self) -> int:
        return self.attn_col_mean.shape[0]

    @property
    def n_heads(self) -> int:
        return self.attn_col_mean.shape[1]

    @property
    def seq_len(self) -> int:
        return self.attn_col_mean.shape[2]

    # ---- derived per-head statistics -------------------------------------------------------------------
    def sink_score(self) -> np.ndarray:
        """[L,H] s_h = mean over queries 1..T−1 of A_i0 (spec §10.4), averaged over sequences."""
        return self.attn_key0_by_query[..., 1:].mean(-1)

    def mean_attn_score_key0(self) -> np.ndarray:
        """[L,H] ᾱ_0 = (1/T) Σ_{i≥0} A_i0 (spec §10.4 at key i = 0)."""
        return self.attn_col_mean[..., 0]

    def learned_sink_mass(self) -> np.ndarray | None:
        """[L,H] mean over queries 1..T−1 of the probability on the learned sink logit (None: no learned sinks),
        averaged like `sink_score` so the two sit side by side."""
        if self.learned_sink_by_query is None:
            return None
        return self.learned_sink_by_query[..., 1:].mean(-1)

    def value_norm_ratio(self) -> np.ndarray:
        """[L,H] ‖W_O^h v_0‖ / median_{i≥1} ‖W_O^h v_i‖."""
        return self.value_norm[..., 0] / np.median(self.value_norm[..., 1:], axis=-1)

    def resid_norm_ratio(self) -> np.ndarray:
        """[R] ‖x_0‖ / median_{i≥1} ‖x_i‖ for each residual stream (embedding, then after each block)."""
        return self.resid_norm[:, 0] / np.median(self.resid_norm[:, 1:], axis=-1)

    def attn_key0_over_tokens(self, tokens) -> np.ndarray:
        """[L,H] mean of A_i0 over all queries whose token is in `tokens` (count-weighted)."""
        idx = np.asarray(sorted(tokens), dtype=int)
        counts = self.token_count[idx]
        if counts.sum() == 0:
            return np.full(self.attn_key0_by_token.shape[:2], np.nan)
        vals = np.where(counts > 0, self.attn_key0_by_token[..., idx], 0.0)
        return (vals * counts).sum(-1) / counts.sum()

    # ---- persistence: safetensors + JSON -----------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write `<path>.safetensors` (arrays and patterns) and `<path>.json` (massive activations as a list of
        records, the form older files have), atomically."""
        from safetensors.numpy import save

        from attnlab.runs import write_bytes, write_text

        path = Path(path)
        tensors = {k: np.ascontiguousarray(getattr(self, k), dtype=np.float64) for k in ARRAY_FIELDS}
        if self.learned_sink_by_query is not None:
            tensors["learned_sink_by_query"] = np.ascontiguousarray(self.learned_sink_by_query, dtype=np.float64)
        tensors.update({f"pattern.{k}": np.ascontiguousarray(v, dtype=np.float32) for k, v in self.patterns.items()})
        if self.logits is not None:
            tensors["logits"] = np.ascontiguousarray(self.logits, dtype=np.float32)
        if self.sink_record is not None:
            tensors.update({k: np.ascontiguousarray(v, dtype=np.float64) for k, v in self.sink_record.arrays().items()})
        write_bytes(path.with_suffix(".safetensors"), save(tensors))
        meta = {
            "massive": massive_records(self.massive),
            "attention_paths": list(self.attention_paths),
            "sinks": self.sink_record is not None,
            "host_kernels": self.host_kernels,
        }
        write_text(path.with_suffix(".json"), json.dumps(meta, indent=1))
        return path.with_suffix(".safetensors")

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        from safetensors.numpy import load_file

        path = Path(path)
        st = path.with_suffix(".safetensors")
        if not st.exists():
            raise InputError(f"no trace at {st}")
        try:
            arrays = load_file(str(st))
        except Exception as exc:  # noqa: BLE001
            raise InputError(f"cannot read trace {st}: {exc}") from None
        from attnlab.runs import read_json

        meta = read_json(path.with_suffix(".json"), "trace file") if path.with_suffix(".json").exists() else {}
        patterns = {k[len("pattern.") :]: v for k, v in arrays.items() if k.startswith("pattern.")}
        saved: dict[str, Any] = {k: arrays[k] for k in ARRAY_FIELDS}
        return cls(
            **saved,
            massive=meta.get("massive", []),
            patterns=patterns,
            learned_sink_by_query=arrays.get("learned_sink_by_query"),
            logits=arrays.get("logits"),
            attention_paths=list(meta.get("attention_paths", [])),
            sink_record=SinkRecord.from_arrays(arrays),
            host_kernels=str(meta.get("host_kernels", "")),
        )
