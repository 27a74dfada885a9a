"""`attnlab ablate` settings: a frozen config, validated before any work (spec extreme-tokens §7, §10.5)."""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.errors import InputError, check, check_count, check_int
from attnlab.hf.settings import WindowSettings, check_head_pairs

MAX_INDEX = 10_000  # layer indices (checked against the model after loading)


@dataclass(frozen=True)
class AblateConfig(WindowSettings):
    """Clean and ablated runs on the same windows (window fields: `WindowSettings`).

    heads: (layer, head) zeroed before the output projection, one condition each; sink_heads: (layer, head) whose
    attention moves onto key 0; mlps: layers whose MLP is zeroed; dims: (layer, position or None, dim) residual
    coordinates zeroed after block `layer`; sweep_layers: every head of these layers, one at a time; together: one
    more condition with all of them at once. sink_from: a `scan` run folder on the same windows whose sink scores
    are reused instead of tracing the baseline again. Indices are checked against the model before any work.
    """

    domains: tuple[str, ...] = ("prose", "code")
    batch_size: int = 4
    heads: tuple[tuple[int, int], ...] = ()
    sink_heads: tuple[tuple[int, int], ...] = ()
    mlps: tuple[int, ...] = ()
    dims: tuple[tuple[int, int | None, int], ...] = ()
    sweep_layers: tuple[int, ...] = ()
    together: bool = False
    sink_from: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("mlps", "sweep_layers"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("heads", "sink_heads", "dims"):
            object.__setattr__(self, name, tuple(tuple(x) for x in getattr(self, name)))
        check_head_pairs(self.heads, "heads")
        check_head_pairs(self.sink_heads, "sink_heads")
        for layer in (*self.mlps, *self.sweep_layers):
            check_count(layer, 0, "mlps/sweep_layers layer", MAX_INDEX)
        for d in self.dims:
            check(len(d) == 3, f"dims: expected (layer, position or None, dim) triples, got {d!r}")
            check_count(d[0], 0, "dims layer", MAX_INDEX)
            check_count(d[2], 0, "dims dimension", 2**20)
            if d[1] is not None:
                check_int(d[1], 0, "dims position", maximum=self.tokens - 1)
        if not (self.heads or self.sink_heads or self.mlps or self.dims or self.sweep_layers):
            raise InputError(
                "nothing to ablate: give --head L.H, --sink-head L.H, --mlp L, --dim L:POS:DIM or --sweep-layer L"
            )
