"""Models that users already hold in another interpretability library, traced through the Hugging Face model inside
(issue 40 item 9): a TransformerLens 4 `TransformerBridge` and an nnsight `LanguageModel`.

- nnsight's `LanguageModel` is an `Envoy` around the transformers model, which it leaves as it was: the model is
  its `_module` (`_model` before nnsight 0.4) and the tokenizer its `.tokenizer`.
- TransformerLens 4's `TransformerBridge` keeps the transformers model as `.original_model` and the tokenizer as
  `.tokenizer`, but booting it replaces the model's submodules *in place* by bridge components (each with the module
  it wraps as `.original_component`, which is how TransformerLens itself reaches the weights). `held_model` puts
  the original submodules back for the length of the call and the bridge's components back after it, so the trace
  runs the transformers model's own forward on the same weights (TransformerLens' own hooks do not fire then).

Neither library is imported here: a model is recognised by its class's module.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported by the calls: `attnlab.trace` stays cheap to reach
    import torch


def wrapper_kind(model: Any) -> str | None:
    """ "transformer_lens" for a TransformerLens `TransformerBridge`, "nnsight" for an nnsight model, else None."""
    roots = {c.__module__.split(".")[0] for c in type(model).__mro__}
    if "transformer_lens" in roots and "original_model" in dir(type(model)):
        return "transformer_lens"
    if "nnsight" in roots:
        return "nnsight"
    return None


def _original(module: torch.nn.Module) -> torch.nn.Module:
    """The module a TransformerLens bridge component wraps (through nested components), or `module` itself."""
    import torch

    inner = getattr(module, "original_component", None)
    while isinstance(inner, torch.nn.Module):
        module, inner = inner, getattr(inner, "original_component", None)
    return module


def _swap_in_originals(root: torch.nn.Module, undo: list[tuple[torch.nn.Module, str, torch.nn.Module]]) -> None:
    """Replace every bridge component under `root` by the module it wraps, noting (parent, name, component)."""
    for name, child in list(root._modules.items()):
        if child is None:
            continue
        inner = _original(child)
        if inner is not child:
            root._modules[name] = inner
            undo.append((root, name, child))
        _swap_in_originals(inner, undo)


def _nnsight_module(model: Any) -> torch.nn.Module:
    """The transformers model inside an nnsight model, its weights loaded first where nnsight has not yet loaded them
    (a model built from a name or folder holds meta tensors until it is dispatched, which its own first trace does)."""
    import torch

    if getattr(model, "dispatched", True) is False and callable(getattr(model, "dispatch", None)):
        model.dispatch()
    for name in ("_module", "_model"):  # nnsight >= 0.4, older releases
        module = model.__dict__.get(name)
        if isinstance(module, torch.nn.Module):
            return module
    from attnlab.errors import InputError

    raise InputError(f"cannot find the transformers model inside this nnsight {type(model).__name__}")


@contextlib.contextmanager
def held_model(model: Any) -> Iterator[tuple[Any, Any]]:
    """(transformers model, tokenizer) inside a TransformerLens bridge or an nnsight model, for the `with` block;
    (model, None) for any other model. A bridge's components are put back on exit, also after an error."""
    kind = wrapper_kind(model)
    if kind == "nnsight":
        yield _nnsight_module(model), getattr(model, "tokenizer", None)
        return
    if kind != "transformer_lens":
        yield model, None
        return
    hf = model.original_model
    undo: list[tuple[torch.nn.Module, str, torch.nn.Module]] = []
    try:
        _swap_in_originals(hf, undo)
        yield hf, getattr(model, "tokenizer", None)
    finally:
        for parent, name, component in reversed(undo):
            parent._modules[name] = component


def unwrapping(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn(model, ...)` that also takes a TransformerLens bridge or an nnsight model as `model`: it gets the
    transformers model inside (`held_model`), and the wrapper's tokenizer as `tokenizer=` where `fn` takes one and
    none was given."""
    takes_tokenizer = "tokenizer" in inspect.signature(fn).parameters

    @functools.wraps(fn)
    def call(model: Any, *args: Any, **kwargs: Any) -> Any:
        if wrapper_kind(model) is None:
            return fn(model, *args, **kwargs)
        with held_model(model) as (hf, tokenizer):
            if takes_tokenizer and kwargs.get("tokenizer") is None:
                kwargs["tokenizer"] = tokenizer
            return fn(hf, *args, **kwargs)

    return call
