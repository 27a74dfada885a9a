"""Norm discovery (`Arch.input_norms`, `Arch.final_norm`) and the layer-by-layer adapter on every tiny family.

The checks watch the model's own forward with plain torch hooks (test instrumentation, independent of the code
under test): the discovered input norm's output is what the block's attention receives, and the discovered final
norm's output is what the LM head receives.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from attnlab.errors import InputError
from attnlab.tracing.adapters.arch import get_arch
from attnlab.tracing.adapters.blockwise import block_parts, capture_block_calls, run_block
from tests.real.families import FAMILIES, V, tiny_family

ALL = [*FAMILIES, "falcon"]  # falcon: consensus model iterates it although its attention is its own code
POST_NORM = {"olmo2"}  # norms after the sublayers only: no input norm


def _watch(model: Any, ids: torch.Tensor) -> dict[Any, torch.Tensor]:
    """One forward of `model` on ids; what each discovered norm returned and what attention / head received."""
    arch = get_arch(model)
    seen: dict[Any, torch.Tensor] = {}

    def keep(key: Any, out: bool) -> Any:
        def hook(mod: Any, args: tuple, third: Any) -> None:  # third: the output, or a pre-hook's kwargs
            seen.setdefault(key, third if out else args[0] if args else third["hidden_states"])

        return hook

    handles = [model.get_output_embeddings().register_forward_pre_hook(keep("head", False), with_kwargs=True)]
    if arch.final_norm is not None:
        handles.append(arch.final_norm.register_forward_hook(keep("final", True)))
    for i, (norm, attn) in enumerate(zip(arch.input_norms, arch.attn)):
        handles.append(attn.register_forward_pre_hook(keep(("attn", i), False), with_kwargs=True))
        if norm is not None:
            handles.append(norm.register_forward_hook(keep(("norm", i), True)))
    try:
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return seen


@pytest.mark.parametrize("name", ALL)
def test_input_and_final_norms_are_the_ones_the_model_applies(name: str) -> None:
    model = tiny_family(name)
    arch = get_arch(model)
    seen = _watch(model, torch.randint(3, V, (2, 9), generator=torch.Generator().manual_seed(0)))
    assert arch.final_norm is not None
    assert torch.equal(seen["final"], seen["head"])
    assert len(arch.input_norms) == arch.n_layers
    for i, norm in enumerate(arch.input_norms):
        if name in POST_NORM:
            assert norm is None
        else:
            assert norm is not None and torch.equal(seen[("norm", i)], seen[("attn", i)]), (name, i)


def test_post_norm_opt_has_no_input_or_final_norm() -> None:
    arch = get_arch(tiny_family("opt", do_layer_norm_before=False))
    assert arch.input_norms == [None] * arch.n_layers and arch.final_norm is None


@pytest.mark.parametrize("name", ["llama", "gpt2", "gpt-neox", "gemma2", "opt", "falcon", "olmo2"])
def test_blocks_run_alone_reproduce_the_model_and_the_norm_is_replaceable(name: str) -> None:
    """Blocks run one by one from the captured calls give the model's hidden states; replacing the input norm by
    itself changes nothing, by zeros changes the output; a copy of a block finds its own parts."""
    model = tiny_family(name)
    arch = get_arch(model)
    ids = torch.randint(3, V, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
        h, calls = capture_block_calls(model, arch.blocks, ids)
        for i, block in enumerate(arch.blocks):
            # The same blocks on the same inputs, called one by one: observed bit-identical (0) on every family at
            # default and AVX2 kernels, 1 thread; 1e-5 kept (not in the numerics matrix: no order changes).
            torch.testing.assert_close(h, want[i], atol=1e-5, rtol=1e-5)
            parts = block_parts(block, model.config)
            assert parts.mlp is arch.mlp[i] and parts.input_norm is arch.input_norms[i]
            nxt = run_block(parts, h, calls.calls[i])
            if parts.input_norm is None:
                with pytest.raises(InputError, match="no input norm"):
                    run_block(parts, h, calls.calls[i], input_norm=torch.zeros_like)
            else:
                norm = parts.input_norm
                assert torch.equal(run_block(parts, h, calls.calls[i], input_norm=norm.forward), nxt)
                assert not torch.equal(run_block(parts, h, calls.calls[i], input_norm=torch.zeros_like), nxt)
            h = nxt
