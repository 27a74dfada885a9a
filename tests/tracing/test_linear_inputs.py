"""The HF adapter's linear-input points `blocks.{l}.{path}.hook_in` (`attnlab.tracing.adapters.linear_inputs`):
found from the module tree, checked by name, and each shows the layer's own input (a torch pre-hook registered
here directly is the reference)."""

from __future__ import annotations

import pytest
import torch

from attnlab.errors import InputError
from attnlab.tracing.adapters.arch import get_arch
from attnlab.tracing.adapters.hf import traced
from attnlab.tracing.adapters.hf_points import hf_hook_points
from tests.real.families import tiny_family


@pytest.mark.parametrize(
    "family, point",
    [
        ("llama", "blocks.1.self_attn.o_proj.hook_in"),
        ("gpt2", "blocks.0.mlp.c_proj.hook_in"),
        ("opt", "blocks.1.fc2.hook_in"),
    ],
)
def test_a_linear_input_point_sees_the_layers_input_and_can_replace_it(family, point):
    model = tiny_family(family)
    arch = get_arch(model)
    assert point in hf_hook_points(arch, linear_inputs=True) and point not in hf_hook_points(arch)
    layer, path = int(point.split(".")[1]), point.split(".", 2)[2].removesuffix(".hook_in")
    module = dict(arch.blocks[layer].named_modules())[path]
    want: list[torch.Tensor] = []
    handle = module.register_forward_pre_hook(lambda mod, args: want.append(args[0].clone()))
    ids = torch.randint(3, 64, (2, 10), generator=torch.Generator().manual_seed(0))
    seen: list[torch.Tensor] = []
    try:
        with traced(model, hooks={point: lambda x, p: seen.append(x.clone())}) as sess:
            plain = sess.forward(ids)
    finally:
        handle.remove()
    assert torch.equal(seen[0], want[0])
    with traced(model, hooks={point: lambda x, p: torch.zeros_like(x)}) as sess:
        assert not torch.allclose(
            sess.forward(ids), plain
        )  # not a tolerance: zeroed inputs must change the logits (by 0.15)
    assert all(not m._forward_pre_hooks for m in model.modules())


def test_unknown_linear_point_is_one_line():
    model = tiny_family("llama")
    with pytest.raises(InputError, match="unknown hook point 'blocks.0.self_attn.nope.hook_in'"):
        with traced(model, hooks={"blocks.0.self_attn.nope.hook_in": lambda x, p: None}):
            pass
