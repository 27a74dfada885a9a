"""Layer-by-layer passes of a transformers causal LM: one decoder block at a time, on a state of the caller's choosing.

`capture_block_calls(model, blocks, ids)` runs the model once on ids `[batch, T]` and keeps, from a forward pre-hook
on every block, the first block's input h0 `[batch, T, d]` (token embeddings, plus learned positions or scaling
where the family has them) and what the model's own forward passed each block besides the hidden states (rotary
embeddings, its own mask: causal, sliding window, ...); a plain causal layer whose mask transformers leaves implicit
gets the explicit additive causal mask `[1, 1, T, T]`.
`run_block(parts, h, call, zero_mlp=..., input_norm=...)` applies one block to h `[batch, T, d]` with those
arguments. `zero_mlp` is the `ZeroMLP` intervention's mechanism (the MLP's output zeroed, as `traced` does it);
`input_norm` replaces the output of the block's input norm (found by `arch`) by a function of that
norm's input. A block need not belong to the model: a copy with redrawn weights runs the same way
(`block_parts(copy)` finds its parts). Every hook is removed when the call returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnlab.errors import InputError
from attnlab.tracing.adapters.arch import input_norm_of, mlp_of
from attnlab.tracing.adapters.hf import _zero_output

NormMap = Callable[[torch.Tensor], torch.Tensor]  # x [..., d] -> y [..., d], in place of a norm


@dataclass
class BlockCalls:
    """What the model's own forward passed each block besides the hidden states: per layer (args, kwargs)."""

    calls: list[tuple[tuple, dict]]
    batch: int

    def rows(self, n: int) -> BlockCalls:
        """The calls of the first `n` rows of the batch (tensors with a batch dimension are sliced)."""

        def cut(x: Any) -> Any:
            if torch.is_tensor(x) and x.dim() > 0 and x.shape[0] == self.batch and self.batch > 1:
                return x[:n]
            return x

        return BlockCalls(
            [(tuple(cut(a) for a in args), {k: cut(v) for k, v in kw.items()}) for args, kw in self.calls], n
        )


@dataclass(frozen=True)
class BlockParts:
    """One decoder block and the submodules a layer-by-layer pass acts on: its MLP and its input norm (None for a
    post-norm block)."""

    block: nn.Module
    mlp: nn.Module
    input_norm: nn.Module | None


def block_parts(block: nn.Module, config: Any = None) -> BlockParts:
    """The parts of any decoder block (a model's or a copy of one), found by `attnlab.tracing.adapters.arch`."""
    mlp = mlp_of(block)
    if mlp is None:
        raise InputError(f"{type(block).__name__}: no MLP found in the block")
    return BlockParts(block, mlp, input_norm_of(block, config))


def _hidden(out: Any) -> torch.Tensor:
    return out[0] if isinstance(out, tuple) else out


@torch.no_grad()
def capture_block_calls(
    model: nn.Module, blocks: list[nn.Module], ids: torch.Tensor
) -> tuple[torch.Tensor, BlockCalls]:
    """The first block's input h0 `[batch, T, d]` and every block's other arguments, from one forward of `model`
    on ids `[batch, T]` (no cache)."""
    calls: list[Any] = [None] * len(blocks)
    first: list[torch.Tensor] = []

    def grab(i: int) -> Callable[..., None]:
        def pre(mod: nn.Module, args: tuple, kwargs: dict) -> None:
            h = args[0] if args else kwargs["hidden_states"]
            if i == 0:
                first.append(h)
            calls[i] = (tuple(args[1:]), {k: v for k, v in kwargs.items() if k != "hidden_states"})

        return pre

    hooks = [b.register_forward_pre_hook(grab(i), with_kwargs=True) for i, b in enumerate(blocks)]
    try:
        model(input_ids=ids, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    h0 = first[0]
    T = ids.shape[1]
    causal = torch.full((T, T), torch.finfo(h0.dtype).min, dtype=h0.dtype, device=h0.device).triu(1)[None, None]
    for _args, kw in calls:
        if "attention_mask" in kw and kw["attention_mask"] is None:
            kw["attention_mask"] = causal  # transformers left plain causal attention implicit
    return h0, BlockCalls(calls, ids.shape[0])


def run_block(
    parts: BlockParts,
    h: torch.Tensor,
    call: tuple[tuple, dict],
    *,
    zero_mlp: bool = False,
    input_norm: NormMap | None = None,
) -> torch.Tensor:
    """The block applied to h `[batch, T, d]` with its captured (args, kwargs) `call`: `[batch, T, d]`. `zero_mlp`:
    its MLP adds nothing (`ZeroMLP`); `input_norm`: the input norm's output is `input_norm(x)` of its input x."""
    args, kw = call
    handles = []
    if input_norm is not None:
        if parts.input_norm is None:
            raise InputError(f"{type(parts.block).__name__} has no input norm to replace (a post-norm block)")
        fn = input_norm
        handles.append(parts.input_norm.register_forward_hook(lambda mod, a, out: fn(a[0])))
    if zero_mlp:
        handles.append(parts.mlp.register_forward_hook(_zero_output))
    try:
        return _hidden(parts.block(h, *args, **kw))
    finally:
        for hd in handles:
            hd.remove()
