"""One intervention vocabulary for toy and real models (spec extreme-tokens §7, §10.4).

An intervention is a value: a frozen dataclass that says *what* to switch off. Each trace adapter compiles the
values it is given into its own mechanism (`trace.adapters.toy` into named hook points, `trace.adapters.hf` into
its attention function and module hooks); nothing is left on the model afterwards.

- `ZeroHead(layer, head)`: z^h = 0 before the output projection W_O (the head writes nothing).
- `ZeroMLP(layer)`: the MLP (dense or mixture-of-experts) adds nothing to the residual stream.
- `ZeroLayer(layer)`: both sublayers of a block add nothing.
- `ZeroDims(layer, dims, positions)`: residual coordinates `dims` set to 0 after block `layer`, at `positions`
  (None: every position).
- `MoveToSink(layer, head, queries)`: the head's attention rows become one-hot on key 0; `queries` is a bool
  mask [batch, query] of the rows to move (None: every row).
- `MeanAblate(point, reference, ...)`: the activation at a named hook point set to its mean over reference
  inputs; `attnlab.trace` compiles it into a hook at that point after one reference forward.

`validate(interventions, shape)` checks every index against a model's `ModelShape` before any work starts, with
one line naming the bad index and the valid range.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from attnlab.errors import InputError


@dataclass(frozen=True)
class ModelShape:
    """What interventions are checked against: sizes, and which layers have attention / an MLP."""

    n_layers: int
    n_heads: int
    d_model: int
    attn_layers: tuple[int, ...] | None = None  # None: every layer
    mlp_layers: tuple[int, ...] | None = None

    def check_layer(self, layer: int, what: str = "layer") -> None:
        if not 0 <= int(layer) < self.n_layers:
            raise InputError(f"{what} {layer} is out of range; the model has layers 0..{self.n_layers - 1}")

    def check_head(self, layer: int, head: int) -> None:
        self.check_layer(layer)
        if self.attn_layers is not None and layer not in self.attn_layers:
            raise InputError(f"layer {layer} has no attention")
        if not 0 <= int(head) < self.n_heads:
            raise InputError(f"head {head} is out of range; the model has heads 0..{self.n_heads - 1}")

    def check_mlp(self, layer: int) -> None:
        self.check_layer(layer, "MLP layer")
        if self.mlp_layers is not None and layer not in self.mlp_layers:
            raise InputError(f"layer {layer} has no MLP")

    def check_dims(self, dims: Iterable[int]) -> None:
        bad = [d for d in dims if not 0 <= int(d) < self.d_model]
        if bad:
            raise InputError(f"residual dimension {bad[0]} is out of range 0..{self.d_model - 1}")


@dataclass(frozen=True)
class ZeroHead:
    layer: int
    head: int = 0

    @property
    def name(self) -> str:
        return f"zero head {self.layer}.{self.head}"

    def validate(self, shape: ModelShape) -> None:
        shape.check_head(self.layer, self.head)


@dataclass(frozen=True)
class ZeroMLP:
    layer: int

    @property
    def name(self) -> str:
        return f"zero MLP {self.layer}"

    def validate(self, shape: ModelShape) -> None:
        shape.check_mlp(self.layer)


@dataclass(frozen=True)
class ZeroLayer:
    layer: int

    @property
    def name(self) -> str:
        return f"zero layer {self.layer}"

    def validate(self, shape: ModelShape) -> None:
        shape.check_layer(self.layer)


@dataclass(frozen=True)
class ZeroDims:
    layer: int
    dims: tuple[int, ...]
    positions: tuple[int, ...] | None = None

    @property
    def name(self) -> str:
        where = "every position" if self.positions is None else f"positions {list(self.positions)}"
        return f"zero dims {list(self.dims)} at {where} after block {self.layer}"

    def validate(self, shape: ModelShape) -> None:
        shape.check_layer(self.layer)
        shape.check_dims(self.dims)
        if not self.dims:
            raise InputError("zero dims: name at least one residual dimension")


@dataclass(frozen=True)
class MoveToSink:
    layer: int
    head: int = 0
    queries: Any = field(default=None, compare=False, repr=False)  # bool [batch, query] or None (every row)
    label: str = "all queries"

    @property
    def name(self) -> str:
        return f"attention {self.layer}.{self.head} -> <s> ({self.label})"

    def validate(self, shape: ModelShape) -> None:
        shape.check_head(self.layer, self.head)


@dataclass(frozen=True)
class MeanAblate:
    """Set the activation at hook point `point` (a TransformerLens name, `attnlab.hook_points(model)`) to its mean
    over the `reference` inputs (a string, strings or token ids [batch, pos]), as Sun et al. do for massive
    activations. `over="batch"`: the mean over reference sequences, per position (the traced inputs may not be
    longer than the reference); `"all"`: over sequences and positions. `positions` (None: all) limits where it is
    set; `heads` (hook_z only) and `dims` (the last axis) limit what. `attnlab.trace` compiles it into a hook."""

    point: str
    reference: Any = field(compare=False, repr=False)
    positions: tuple[int, ...] | None = None
    heads: tuple[int, ...] | None = None
    dims: tuple[int, ...] | None = None
    over: str = "batch"

    @property
    def name(self) -> str:
        return f"mean-ablate {self.point} (mean over {'sequences' if self.over == 'batch' else 'all tokens'})"

    def validate(self, shape: ModelShape) -> None:
        if self.over not in ("batch", "all"):
            raise InputError(f"MeanAblate.over must be 'batch' or 'all', got {self.over!r}")
        if self.heads is not None:
            if not self.point.endswith("hook_z"):
                raise InputError(f"MeanAblate(heads=...) applies to attn.hook_z points, not {self.point}")
            for h in self.heads:
                shape.check_head(int(self.point.split(".")[1]), h)


Intervention = ZeroHead | ZeroMLP | ZeroLayer | ZeroDims | MoveToSink


def validate(interventions: Iterable[Intervention], shape: ModelShape) -> list[Intervention]:
    """Check every intervention against `shape`; returns them as a list. One-line `InputError` on a bad index."""
    items = list(interventions)
    for iv in items:
        if isinstance(iv, MeanAblate):
            raise InputError("MeanAblate needs a reference forward: pass it to attnlab.trace, which compiles it")
        if not isinstance(iv, (ZeroHead, ZeroMLP, ZeroLayer, ZeroDims, MoveToSink)):
            raise InputError(f"not an intervention: {iv!r}")
        iv.validate(shape)
    return items
