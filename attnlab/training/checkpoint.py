"""The one checkpoint format of every training run (`bb train`, `series train`): a folder of safetensors plus JSON,
never a pickle, tied to the config hash.

    <folder>/model.safetensors   the model's state_dict (a HF checkpoint writes it with `save_pretrained`, beside
                                 its config.json and tokenizer, so the folder also loads as a transformers model)
    <folder>/optim.safetensors   the optimiser's tensor state, keyed '<parameter name>.<slot>' (e.g. 'w.exp_avg')
    <folder>/state.json          {"step", "config", "config_hash", "optimizer_scalars": {'<parameter>.<slot>': x}}

A folder is built as `<folder>.tmp` and renamed (`runs.atomic_folder`), so a folder named `step_N` is complete.
`series train` checkpoints written before issue 20 name their JSON `trainer_state.json` and carry no config hash;
they hold the same tensors and load as they are (`LEGACY_STATE`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from attnlab.errors import InputError
from attnlab.runs import atomic_folder, read_json

STATE = "state.json"
LEGACY_STATE = "trainer_state.json"  # `series train` before issue 20: same tensors, no config hash

WriteModel = Callable[[torch.nn.Module, Path], None]  # (model, folder) -> writes folder/model.safetensors (+ extras)


def write_weights(model: torch.nn.Module, folder: Path) -> None:
    """`folder/model.safetensors`: the model's state_dict, contiguous."""
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))


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
    """Put the state of `optimizer_tensors` back into `opt` (moments beside their parameters' device)."""
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
            value = value.to(p.device)  # a no-op on the cpu
        state.setdefault(p, {})[slot] = value
    opt.state.clear()
    opt.state.update(state)


def save_checkpoint(
    folder: Path,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    state: dict,
    write_model: WriteModel = write_weights,
) -> Path:
    """Write a complete checkpoint folder atomically (weights by `write_model`); returns its path. `state` should
    hold "step", "config" and "config_hash" (`attnlab.training.loop` writes them)."""
    folder = Path(folder)
    with atomic_folder(folder) as tmp:  # a failure (a full disk) leaves no step_N.tmp behind
        write_model(model, tmp)
        tensors, scalars = optimizer_tensors(model, opt)
        save_file(tensors, str(tmp / "optim.safetensors"))
        (tmp / STATE).write_text(json.dumps({**state, "optimizer_scalars": scalars}, indent=1))
    return folder


def state_file(folder: Path) -> Path | None:
    """The JSON of a checkpoint folder (`state.json`, or a legacy series `trainer_state.json`), None if absent."""
    for name in (STATE, LEGACY_STATE):
        if (Path(folder) / name).is_file():
            return Path(folder) / name
    return None


def read_state(folder: Path) -> dict:
    """The checkpoint's state JSON; one line if it is missing, corrupt or has no integer step."""
    path = state_file(folder) or Path(folder) / STATE
    state = read_json(path, "checkpoint state")
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise InputError(f"checkpoint state {path} is corrupt (no step); restore or delete it")
    return state


def checkpoint_steps(run_dir: Path) -> list[int]:
    """Steps of the complete `checkpoints/step_N` folders of a run (sorted)."""
    root = Path(run_dir) / "checkpoints"
    steps = []
    for d in root.glob("step_*") if root.is_dir() else []:
        tail = d.name.split("_", 1)[1]
        if tail.isdigit() and state_file(d) is not None:
            steps.append(int(tail))
    return sorted(steps)


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete `checkpoints/step_N` folder, or None."""
    steps = checkpoint_steps(run_dir)
    return Path(run_dir) / "checkpoints" / f"step_{steps[-1]}" if steps else None


def load_checkpoint(folder: Path, model: torch.nn.Module, opt: torch.optim.Optimizer | None = None) -> dict:
    """Load weights (and optimiser state) from a checkpoint folder; returns its state JSON. One line naming the
    folder if anything in it is unreadable."""
    folder = Path(folder)
    state = read_state(folder)
    try:
        model.load_state_dict(load_file(str(folder / "model.safetensors")))
        if opt is not None:
            tensors = load_file(str(folder / "optim.safetensors"))
            load_optimizer_tensors(model, opt, tensors, state.get("optimizer_scalars", {}))
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure here means the checkpoint is unusable
        raise InputError(
            f"unreadable checkpoint {folder}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        ) from None
    return state


def prune_checkpoints(run_dir: Path, keep_last: int) -> None:
    """Delete all but the newest `keep_last` `checkpoints/step_N` folders."""
    root = Path(run_dir) / "checkpoints"
    for step in checkpoint_steps(run_dir)[:-keep_last]:
        shutil.rmtree(root / f"step_{step}", ignore_errors=True)
