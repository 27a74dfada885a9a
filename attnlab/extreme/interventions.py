"""Interventions on the toy model as composable hook objects (spec extreme-tokens §7).

Each intervention checks its indices against the model (`validate`) and returns hooks (`hooks`) that the
tracing run installs before its own recording hooks, so metrics see the intervened model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnlab.errors import AttnlabError
from attnlab.models.toy import ToyTransformer


def _check_layer(model: ToyTransformer, layer: int) -> None:
    if not 0 <= layer < model.cfg.n_layers:
        raise AttnlabError(f"layer {layer} is out of range; the model has layers 0..{model.cfg.n_layers - 1}")


def _check_head(model: ToyTransformer, layer: int, head: int) -> None:
    _check_layer(model, layer)
    if model.blocks[layer].attn is None:
        raise AttnlabError(f"layer {layer} has no attention (no_attn)")
    if not 0 <= head < model.cfg.n_heads:
        raise AttnlabError(f"head {head} is out of range; the model has heads 0..{model.cfg.n_heads - 1}")


@dataclass
class ZeroHead:
    """z^h = 0 before W_O: the head writes nothing."""

    layer: int
    head: int = 0

    @property
    def name(self) -> str:
        return f"zero head {self.layer}.{self.head}"

    def validate(self, model: ToyTransformer) -> None:
        _check_head(model, self.layer, self.head)

    def hooks(self, model: ToyTransformer) -> dict:
        def fn(z, name):
            z = z.clone()
            z[:, :, self.head] = 0.0
            return z
        return {f"blocks.{self.layer}.attn.z": fn}


@dataclass
class ZeroMLP:
    """Removes the MLP's residual add."""

    layer: int

    @property
    def name(self) -> str:
        return f"zero MLP {self.layer}"

    def validate(self, model: ToyTransformer) -> None:
        _check_layer(model, self.layer)
        if model.blocks[self.layer].mlp is None:
            raise AttnlabError(f"layer {self.layer} has no MLP (no_mlp)")

    def hooks(self, model: ToyTransformer) -> dict:
        return {f"blocks.{self.layer}.mlp.out": lambda x, name: torch.zeros_like(x)}


@dataclass
class ZeroLayer:
    """Removes both sublayers of a block (the residual passes through unchanged)."""

    layer: int

    @property
    def name(self) -> str:
        return f"zero layer {self.layer}"

    def validate(self, model: ToyTransformer) -> None:
        _check_layer(model, self.layer)

    def hooks(self, model: ToyTransformer) -> dict:
        p = f"blocks.{self.layer}."
        out = {}
        if model.blocks[self.layer].attn is not None:
            out[p + "attn.out"] = lambda x, name: torch.zeros_like(x)
        if model.blocks[self.layer].mlp is not None:
            out[p + "mlp.out"] = lambda x, name: torch.zeros_like(x)
        return out


@dataclass
class MoveAttnToSink:
    """Each selected query row becomes one-hot on key 0 (forces the head dormant).

    `queries`: a bool mask [B,T] of the rows to move, or None for every row.
    """

    layer: int
    head: int = 0
    queries: torch.Tensor | None = field(default=None, repr=False)
    label: str = "all queries"

    @property
    def name(self) -> str:
        return f"attention {self.layer}.{self.head} -> <s> ({self.label})"

    def validate(self, model: ToyTransformer) -> None:
        _check_head(model, self.layer, self.head)

    def hooks(self, model: ToyTransformer) -> dict:
        def fn(pattern, name):
            B, H, T, _ = pattern.shape
            rows = torch.ones(B, T, dtype=torch.bool) if self.queries is None else self.queries
            if rows.shape != (B, T):
                raise AttnlabError(f"query mask shape {tuple(rows.shape)} does not match the batch [{B},{T}]")
            one_hot = torch.zeros(T, dtype=pattern.dtype)
            one_hot[0] = 1.0
            pattern = pattern.clone()
            sel = pattern[:, self.head]
            sel[rows] = one_hot
            pattern[:, self.head] = sel
            return pattern
        return {f"blocks.{self.layer}.attn.pattern": fn}


@dataclass
class ZeroDims:
    """Zeroes residual coordinates `dims` at positions `positions` after block `layer`."""

    layer: int
    positions: list[int]
    dims: list[int]

    @property
    def name(self) -> str:
        return f"zero dims {self.dims} at positions {self.positions} after block {self.layer}"

    def validate(self, model: ToyTransformer) -> None:
        _check_layer(model, self.layer)
        bad = [d for d in self.dims if not 0 <= d < model.cfg.d_model]
        if bad:
            raise AttnlabError(f"dimension {bad[0]} is out of range 0..{model.cfg.d_model - 1}")

    def hooks(self, model: ToyTransformer) -> dict:
        def fn(x, name):
            x = x.clone()
            for p in self.positions:
                x[:, p, self.dims] = 0.0
            return x
        return {f"blocks.{self.layer}.resid_post": fn}


def combine_hooks(interventions, model: ToyTransformer) -> dict:
    """Validate and merge the hooks of several interventions ({point: [fns]})."""
    merged: dict = {}
    for iv in interventions:
        iv.validate(model)
        for k, fn in iv.hooks(model).items():
            merged.setdefault(k, []).append(fn)
    return merged
