"""Checkpoints as safetensors + JSON (never pickles): `checkpoints/step_N/{model,optim}.safetensors, state.json`.

Written into a temporary folder and renamed, so a folder named `step_N` is always complete.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from attnlab.errors import InputError
from attnlab.runs import atomic_folder


def optimizer_tensors(model: torch.nn.Module, opt: torch.optim.Optimizer) -> tuple[dict, dict]:
    """Optimiser state keyed by parameter name: ({'<param>.<slot>': tensor}, {'<param>.<slot>': scalar})."""
    names = {id(p): n for n, p in model.named_parameters()}
    tensors, scalars = {}, {}
    for group in opt.param_groups:
        for p in group["params"]:
            for slot, value in opt.state.get(p, {}).items():
                key = f"{names[id(p)]}.{slot}"
                if isinstance(value, torch.Tensor) and value.dim() > 0:
                    tensors[key] = value.detach().clone().contiguous()
                else:
                    scalars[key] = float(value)
    return tensors, scalars


def load_optimizer_tensors(model: torch.nn.Module, opt: torch.optim.Optimizer, tensors: dict, scalars: dict) -> None:
    params = dict(model.named_parameters())
    state: dict = {}
    for key, value in list(tensors.items()) + list(scalars.items()):
        pname, slot = key.rsplit(".", 1)
        if pname not in params:
            raise InputError(f"checkpoint has optimiser state for unknown parameter {pname!r}")
        p = params[pname]
        if isinstance(value, float):
            value = torch.tensor(value)  # e.g. Adam's step counter (a 0-d tensor in torch, kept on the cpu)
        else:
            value = value.to(p.device)  # moments beside their parameter (a no-op on the cpu)
        state.setdefault(p, {})[slot] = value
    opt.state.clear()
    opt.state.update(state)


def save_checkpoint(folder: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, state: dict) -> Path:
    """Write a complete checkpoint folder atomically and return its path."""
    folder = Path(folder)
    with atomic_folder(folder) as tmp:  # a failure (a full disk) leaves no step_N.tmp behind
        save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(tmp / "model.safetensors"))
        tensors, scalars = optimizer_tensors(model, opt)
        save_file(tensors, str(tmp / "optim.safetensors"))
        (tmp / "state.json").write_text(json.dumps({**state, "optimizer_scalars": scalars}, indent=1))
    return folder


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete `checkpoints/step_N` folder, or None."""
    root = Path(run_dir) / "checkpoints"
    found = []
    for d in root.glob("step_*") if root.is_dir() else []:
        if d.name.endswith(".tmp") or not (d / "state.json").exists():
            continue
        try:
            found.append((int(d.name.split("_", 1)[1]), d))
        except ValueError:
            continue
    return max(found)[1] if found else None


def load_checkpoint(folder: Path, model: torch.nn.Module, opt: torch.optim.Optimizer | None = None) -> dict:
    """Load weights (and optimiser state) from a checkpoint folder; return its state.json dict."""
    folder = Path(folder)
    try:
        state = json.loads((folder / "state.json").read_text())
        weights = load_file(str(folder / "model.safetensors"))
        model.load_state_dict(weights)
        if opt is not None:
            load_optimizer_tensors(
                model, opt, load_file(str(folder / "optim.safetensors")), state.get("optimizer_scalars", {})
            )
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure here means the checkpoint is unusable
        raise InputError(
            f"unreadable checkpoint {folder}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        ) from None
    return state


def prune_checkpoints(run_dir: Path, keep_last: int) -> None:
    root = Path(run_dir) / "checkpoints"
    steps = sorted(
        (int(d.name.split("_")[1]), d)
        for d in root.glob("step_*")
        if d.is_dir() and not d.name.endswith(".tmp") and d.name.split("_")[1].isdigit()
    )
    for _, d in steps[:-keep_last]:
        shutil.rmtree(d, ignore_errors=True)
