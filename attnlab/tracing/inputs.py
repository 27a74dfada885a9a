"""What `attnlab.trace` is given, resolved before any forward: the model's kind and sizes, and the inputs (a
string, strings, token ids with an optional `attention_mask`, or a tokenizer's output) as a padded `Batch`, every
bad value refused in one line (docs/api.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from attnlab.errors import InputError

if TYPE_CHECKING:
    import torch

    from attnlab.tracing.padding import Batch


def is_toy(model: Any) -> bool:
    """Whether `model` is attnlab's own `ToyTransformer` (else a transformers causal LM)."""
    from attnlab.toy.model import ToyTransformer

    return isinstance(model, ToyTransformer)


def embedding_rows(model: Any) -> int:
    """The rows of the model's token embedding (its vocabulary as the ids index it)."""
    if is_toy(model):
        return int(model.cfg.vocab)
    return int(model.get_input_embeddings().weight.shape[0])


def n_layers(model: Any) -> int:
    """The number of decoder blocks."""
    if is_toy(model):
        return int(model.cfg.n_layers)
    from attnlab.tracing.adapters.arch import get_arch

    return int(get_arch(model).n_layers)


def _encode(texts: Sequence[str], tokenizer: Any) -> Batch:
    """The `Batch` of the strings' tokenisations (no special tokens added): padded with the tokenizer's own pad
    token (0 where it has none: pads never reach the model) on its `padding_side` when their lengths differ."""
    if tokenizer is None:
        raise InputError("string inputs need a tokenizer: pass tokenizer=, or a model name/path that has one")
    from attnlab.tracing.padding import from_rows

    rows = [list(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    pad = getattr(tokenizer, "pad_token_id", None)
    side = "left" if getattr(tokenizer, "padding_side", "right") == "left" else "right"
    return from_rows(rows, 0 if pad is None else int(pad), side)


def _as_ids(inputs: Any) -> torch.Tensor:
    """Token ids (long) from a tensor, an array or nested lists of integers, refused in one line otherwise."""
    import numpy as np
    import torch

    try:
        arr = inputs.detach().cpu().numpy() if isinstance(inputs, torch.Tensor) else np.asarray(inputs)
    except (TypeError, ValueError) as exc:
        raise InputError(f"inputs must be a string, strings or token ids [batch, pos]: {exc}") from None
    if arr.dtype.kind not in "iu":  # a float or bool cast to long would silently become other tokens
        raise InputError(f"token ids must be integers, got {arr.dtype} (cast them yourself if that is meant)")
    return torch.as_tensor(arr, dtype=torch.long)


def resolve_batch(inputs: Any, model: Any, tokenizer: Any, attention_mask: Any = None) -> Batch:
    """The `Batch` (ids [batch, pos] with each row's real tokens) from a string, strings, ids with an optional
    transformers `attention_mask` [batch, pos] of 0/1, or a mapping with `input_ids` (and `attention_mask`), as a
    tokenizer returns; every row needs >= 2 real tokens inside the embedding (pads are never run)."""
    from attnlab.tracing.padding import from_mask

    if isinstance(inputs, Mapping) and "input_ids" in inputs:
        attention_mask = inputs.get("attention_mask") if attention_mask is None else attention_mask
        inputs = inputs["input_ids"]
    if isinstance(inputs, str):
        inputs = [inputs]
    if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(t, str) for t in inputs):
        if attention_mask is not None:
            raise InputError("attention_mask goes with token ids; strings of different lengths are padded for you")
        batch = _encode(inputs, tokenizer)
    else:
        ids = _as_ids(inputs)
        ids = ids[None] if ids.dim() == 1 else ids
        if ids.dim() != 2 or ids.shape[0] < 1 or ids.shape[1] < 1:
            raise InputError(f"inputs must hold at least one sequence of >= 2 tokens, got shape {tuple(ids.shape)}")
        batch = from_mask(ids, attention_mask)
    short = [row for row, n in enumerate(batch.lengths) if n < 2]
    if short:
        raise InputError(f"inputs must hold at least one sequence of >= 2 tokens, got shape {tuple(batch.ids.shape)}"
                         if not batch.padded else f"sequence {short[0]} has {batch.lengths[short[0]]} real token(s); "
                         "each needs >= 2")  # fmt: skip
    rows = embedding_rows(model)
    real = [batch.sequence(r) for r in range(len(batch.lengths))]
    low, high = min(int(r.min()) for r in real), max(int(r.max()) for r in real)
    if low < 0 or high >= rows:
        raise InputError(f"token id {high if high >= rows else low} is outside the embedding's {rows} rows")
    return batch


def resolve_inputs(inputs: Any, model: Any, tokenizer: Any) -> torch.Tensor:
    """Token ids [batch, pos] (long) of equal-length sequences from a string, strings or ids (`resolve_batch`)."""
    batch = resolve_batch(inputs, model, tokenizer)
    if batch.padded:
        raise InputError(f"the sequences have different lengths {sorted(set(batch.lengths))}; pass equal-length ones")
    return batch.ids


def count_layers_from_end(model: Any, interventions: list, keep: list[tuple[int, int]]) -> tuple[list, list]:
    """Interventions and kept (layer, head) pairs with a negative layer counted from the end, as Python indexes
    (-1: the last layer); a layer below -n_layers is left for the validation to refuse in one line."""
    import dataclasses

    if all(getattr(iv, "layer", 0) >= 0 for iv in interventions) and all(layer >= 0 for layer, _ in keep):
        return interventions, keep  # nothing to count: the model's tree is not walked
    n = n_layers(model)

    def fixed(layer: int) -> int:
        return layer + n if -n <= layer < 0 else layer

    ivs = [
        dataclasses.replace(iv, layer=fixed(iv.layer)) if getattr(iv, "layer", 0) < 0 else iv for iv in interventions
    ]
    return ivs, [(fixed(layer), head) for layer, head in keep]
