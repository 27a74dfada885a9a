"""Named hook points at the input of every linear layer inside a decoder block (the HF adapter's extra points).

`blocks.{l}.{path}.hook_in`, where `path` is the module's name inside decoder block l as `named_modules()` gives
it: e.g. `self_attn.q_proj`, `mlp.down_proj` (Llama), `attn.c_attn`, `mlp.c_fc` (GPT-2's `Conv1D`), `fc1` (OPT).
Every `nn.Linear` and GPT-2 `Conv1D` the block holds has one, in `named_modules()` order: these are the tensors a
W8A8 deployment quantises. A hook there sees the layer's input x [batch, pos, d_in] ([tokens, d_in] for a
mixture-of-experts expert, which reads only the tokens routed to it) and may return a replacement of the same shape.
Layers that read one tensor (q/k/v, gate/up) are each shown that same tensor object, in the order the model runs
them, so a hook can tell a shared input by identity. The TransformerLens-named points (`hf_hook_points`) are the
default list; these are listed with `hf_hook_points(arch, linear_inputs=True)` and accepted by `traced(hooks=...)`.
"""

from __future__ import annotations

from torch import nn

from attnlab.tracing.adapters.arch import Arch

LINEAR_INPUT = "hook_in"


def is_linear(module: nn.Module) -> bool:
    """An `nn.Linear` or GPT-2's transposed `Conv1D` (y = x W + b)."""
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


def linear_modules(block: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name inside the block, module) of every linear layer of one decoder block, in `named_modules()` order."""
    return [(n, m) for n, m in block.named_modules() if is_linear(m)]


def linear_input_points(arch: Arch) -> dict[str, tuple[int, str]]:
    """{`blocks.{l}.{path}.hook_in`: (l, path)} for every linear layer of every decoder block, block by block."""
    return {
        f"blocks.{layer}.{path}.{LINEAR_INPUT}": (layer, path)
        for layer, block in enumerate(arch.blocks)
        for path, _ in linear_modules(block)
    }


def linear_input_module(arch: Arch, layer: int, point: str) -> nn.Module | None:
    """The linear layer behind point `'{path}.hook_in'` of block `layer` (None: not such a point)."""
    path, dot, suffix = point.rpartition(".")
    if not dot or suffix != LINEAR_INPUT:
        return None
    return dict(linear_modules(arch.blocks[layer])).get(path)
