"""The named hook points of a transformers causal LM (TransformerLens' names, `hf_hook_points`) and the module hooks
that run a user's functions at them (`install_user_hooks`; the points inside the attention function go to the
session as `attention_hooks`). Every handle is returned for the session to remove (`hf.traced`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from attnlab.errors import InputError
from attnlab.tracing.adapters.arch import Arch
from attnlab.tracing.adapters.hooked import ATTN_POINTS, AttnHooks, resid_mid_sites
from attnlab.tracing.adapters.linear_inputs import LINEAR_INPUT, linear_input_module, linear_input_points


def input_device(model: nn.Module) -> torch.device:
    """Where the model's input ids go: its embedding's device (CPU when a device map offloads it to disk)."""
    get = getattr(model, "get_input_embeddings", None)
    w = getattr(get() if callable(get) else None, "weight", None)
    if isinstance(w, torch.Tensor) and w.device.type != "meta":
        return w.device
    return torch.device("cpu")


def hidden_of(output: Any) -> torch.Tensor:
    """The hidden state [B,T,d] of a module's output (the first item of a tuple)."""
    return output[0] if isinstance(output, tuple) else output


def with_hidden(output: Any, hidden: torch.Tensor) -> Any:
    """The module's output with its hidden state replaced by `hidden`."""
    return (hidden,) + tuple(output[1:]) if isinstance(output, tuple) else hidden


UserHook = Callable[[torch.Tensor, str], Any]
# TransformerLens's names for the points every supported family has: (suffix, what the module hook sees).
HF_POINTS = ("hook_resid_pre", "hook_resid_post", "attn.hook_z", "hook_attn_out", "hook_mlp_out")


MID = "hook_resid_mid"
EMBED, FINAL = "hook_embed", "ln_final.hook_normalized"  # the model-level points (TransformerLens's names)


def _attention_layers(arch: Arch) -> list[int]:
    """The layers whose attention runs through the "attnlab" function (a hybrid's other layers and the eager
    fallback's have no q/k/v, scores or pattern points)."""
    return arch.attention_set if arch.interface else []


def hf_hook_points(arch: Arch, linear_inputs: bool = False, model: nn.Module | None = None) -> list[str]:
    """`hook_embed`, then `blocks.{l}.<point>` for every decoder block found by architecture discovery (`arch`), then
    `ln_final.hook_normalized` (where the model has a final norm); `hook_embed` and `blocks.{l}.hook_resid_mid` (not
    on parallel blocks: `hooked.resid_mid_sites`) need `model`. With `linear_inputs` also `blocks.{l}.{path}.hook_in`
    at the input of every linear layer (`adapters.linear_inputs`)."""
    mid = model is not None and not isinstance(resid_mid_sites(model, arch, input_device(model)), str)
    attn = set(_attention_layers(arch))
    points = [EMBED] if model is not None else []
    mixing = set(arch.attention_set)  # a hybrid's other layers have no attention output (`Arch.attention_layers`)
    for l in range(arch.n_layers):
        here = HF_POINTS if l in mixing else tuple(p for p in HF_POINTS if p not in ("attn.hook_z", "hook_attn_out"))
        points += [f"blocks.{l}.{p}" for p in here] + ([f"blocks.{l}.{MID}"] if mid else [])
        points += [f"blocks.{l}.{p}" for p in ATTN_POINTS] if l in attn else []
    points += [FINAL] if arch.final_norm is not None else []
    return points + list(linear_input_points(arch)) if linear_inputs else points


def split_point(name: str, arch: Arch) -> tuple[int, str]:
    """'blocks.3.attn.hook_z' -> (3, 'attn.hook_z'), 'blocks.3.mlp.down_proj.hook_in' -> (3, 'mlp.down_proj.hook_in'),
    'hook_embed' -> (-1, 'hook_embed'); one-line InputError naming the valid points otherwise."""
    if name == EMBED or (name == FINAL and arch.final_norm is not None):
        return -1, name
    parts = name.split(".", 2)
    ok = len(parts) == 3 and parts[0] == "blocks" and parts[1].isdigit() and int(parts[1]) < arch.n_layers
    if ok and parts[2] in ATTN_POINTS and int(parts[1]) not in _attention_layers(arch):
        raise InputError(f"{name}: layer {parts[1]} of {arch.model_type} has no attention function to hook (its "
                         "attention computes its own weights, or it is not an attention layer)")  # fmt: skip
    known = (*HF_POINTS, MID, *ATTN_POINTS)
    if not ok or (parts[2] not in known and linear_input_module(arch, int(parts[1]), parts[2]) is None):
        raise InputError(
            f"unknown hook point {name!r}; this model has blocks.0..{arch.n_layers - 1}.{{{', '.join(HF_POINTS)}}} "
            f"and blocks.{{l}}.<linear layer>.{LINEAR_INPUT}"
        )
    if parts[2] in ("attn.hook_z", "hook_attn_out"):
        arch.check_attention_layer(int(parts[1]), name)  # a hybrid's state-space layer has none
    return int(parts[1]), parts[2]


def _call_user(fn: UserHook, x: torch.Tensor, name: str) -> torch.Tensor | None:
    """Run a user hook; a returned tensor must keep the activation's shape."""
    y = fn(x, name)
    if y is not None and (not torch.is_tensor(y) or y.shape != x.shape):
        got = tuple(y.shape) if torch.is_tensor(y) else type(y).__name__
        raise InputError(f"hook at {name} returned {got}; return None or a tensor of shape {tuple(x.shape)}")
    return y


def _user_output_hook(fn: UserHook, name: str, bt: list[tuple[int, int]] | None = None) -> Callable[..., Any]:
    """Forward hook: `fn(hidden [B,T,D], name)` on a module's output (tuple outputs: their first element). With
    `bt` (the block's [B,T], `_block_bt`) an output flattened to [B·T,D] (OPT's fc2) is shown as [B,T,D]."""

    def post(mod: nn.Module, args: Any, output: Any) -> Any:
        x = hidden_of(output)
        shown = x.view(*bt[-1], x.shape[-1]) if bt and x.dim() == 2 else x
        y = _call_user(fn, shown, name)
        if y is None and (shown is x or not torch.is_grad_enabled()):
            return None
        y = shown if y is None else y  # under autograd the forward goes on from the tensor the hook saw
        return with_hidden(output, y.reshape(x.shape))

    return post


def _block_bt(block: nn.Module, handles: list[Any]) -> list[tuple[int, int]]:
    """A list that a pre-hook on `block` (its handle appended to `handles`) fills with the [B,T] of each input."""
    bt: list[tuple[int, int]] = []

    def shape(mod: nn.Module, args: tuple, kwargs: dict) -> None:
        x = args[0] if args else kwargs["hidden_states"]
        bt.append(tuple(x.shape[:2]))

    handles.append(block.register_forward_pre_hook(shape, with_kwargs=True))
    return bt


def _user_input_hook(fn: UserHook, name: str, heads: tuple[int, int] | None) -> Callable[..., Any]:
    """Forward pre-hook: `fn(x, name)` on a module's first input; with `heads` = (H, d_h) the input [B,T,H·d_h]
    is shown as z [B,T,H,d_h] (TransformerLens's hook_z)."""

    def pre(mod: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        x = args[0] if args else kwargs["hidden_states"]
        view = x if heads is None else x.view(*x.shape[:-1], *heads)
        y = _call_user(fn, view, name)
        if y is None and (view is x or not torch.is_grad_enabled()):
            return None
        y = view if y is None else y  # under autograd the forward goes on from the tensor the hook saw
        y = y.reshape(x.shape)
        return ((y,) + tuple(args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": y})

    return pre


def _resid_mid_hook(fn: UserHook, name: str, bt: list[tuple[int, int]]) -> Callable[..., Any]:
    """Forward pre-hook on the module that reads resid_mid (`hooked.resid_mid_sites`): `fn(x [B,T,D], name)`; a
    replacement is written into x in place, so that the block's residual (the same tensor) carries it too. bt holds
    the block's [B,T] (OPT flattens the stream to [B·T,D] there; under autograd the hook then sees a copy [B,T,D]
    that is written back, so that the forward goes on from the tensor the hook saw)."""

    def pre(mod: nn.Module, args: tuple, kwargs: dict) -> None:
        x = args[0] if args else kwargs["hidden_states"]
        shown = x.view(*bt[-1], x.shape[-1]) if x.dim() == 2 else x
        shown = shown.clone() if shown is not x and torch.is_grad_enabled() else shown
        y = _call_user(fn, shown, name)
        if y is not None or shown.data_ptr() != x.data_ptr():
            x.copy_((shown if y is None else y).reshape(x.shape))

    return pre


def _install_mid_hooks(model: nn.Module, arch: Arch, hooks: dict[str, UserHook]) -> list[Any]:
    """The user's `blocks.{l}.hook_resid_mid` hooks (one discovery forward; parallel blocks refused in one line)."""
    if not hooks:
        return []
    sites = resid_mid_sites(model, arch, input_device(model))
    if isinstance(sites, str):
        raise InputError(f"{next(iter(hooks))}: {sites}")
    handles: list[Any] = []
    for name, fn in hooks.items():
        layer = int(name.split(".")[1])
        bt = _block_bt(arch.blocks[layer], handles)
        handles.append(sites[layer].register_forward_pre_hook(_resid_mid_hook(fn, name, bt), with_kwargs=True))
    return handles


def attention_hooks(hooks: dict[str, UserHook]) -> AttnHooks:
    """{layer: {point: fn(x) -> replacement or None}} of the user's hooks inside the attention function."""
    out: AttnHooks = {}
    for name, fn in hooks.items():
        _, layer, point = name.split(".", 2)
        out.setdefault(int(layer), {})[point] = _bound(fn, name)
    return out


def _bound(fn: UserHook, name: str) -> Callable[[torch.Tensor], torch.Tensor | None]:
    return lambda x: _call_user(fn, x, name)


def install_user_hooks(model: nn.Module, arch: Arch, hooks: dict[str, UserHook]) -> list[Any]:
    """The user's hooks at named points (`hf_hook_points`, with the linear inputs) but those inside the attention
    function (`attention_hooks`); handles returned for removal."""
    handles = _install_mid_hooks(model, arch, {n: f for n, f in hooks.items() if n.endswith(f".{MID}")})
    for name, fn in hooks.items():
        layer, point = split_point(name, arch)
        if point in (MID, *ATTN_POINTS):
            continue
        if point in (EMBED, FINAL):
            held: Any = model  # a transformers PreTrainedModel
            where: Any = held.get_input_embeddings() if point == EMBED else arch.final_norm
            handles.append(where.register_forward_hook(_user_output_hook(fn, name)))
        elif point == "hook_resid_pre":
            handles.append(
                arch.blocks[layer].register_forward_pre_hook(_user_input_hook(fn, name, None), with_kwargs=True)
            )
        elif point == "attn.hook_z":
            hz = (arch.n_heads, arch.head_dim)
            handles.append(
                arch.out_proj[layer].register_forward_pre_hook(_user_input_hook(fn, name, hz), with_kwargs=True)
            )
        elif point not in HF_POINTS:  # a linear layer's input (`adapters.linear_inputs`), checked by split_point
            linear: Any = linear_input_module(arch, layer, point)
            handles.append(linear.register_forward_pre_hook(_user_input_hook(fn, name, None), with_kwargs=True))
        elif point == "hook_mlp_out":  # OPT's fc2 works on [B·T, D]: shown as [B, T, D]
            bt = _block_bt(arch.blocks[layer], handles)
            handles.append(arch.mlp[layer].register_forward_hook(_user_output_hook(fn, name, bt)))
        else:
            module = {"hook_resid_post": arch.blocks, "hook_attn_out": arch.attn}[point]
            handles.append(module[layer].register_forward_hook(_user_output_hook(fn, name)))
    return handles
