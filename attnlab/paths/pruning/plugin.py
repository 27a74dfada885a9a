"""A trained network's attention plugged into the theory (attention-paths spec §16, S10).

The attention maps that a gradient-descent-trained network (the `paths prune` run's `gd_model`, spec §9.3)
computes on each digit episode become `precomputed` heads: per-example maps [P, n_tok, n_tok], treated as fixed.
The theory then sees only the attention routes: the network's trained value weights, and any residual or MLP
route of a real transformer, are ignored. Reported: the theory's test accuracy at (N, T), the GP's on the same
maps (U = Sigma^2 I) and the trained network's own accuracy on the same test episodes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from attnlab.errors import InputError
from attnlab.paths.networks.architecture import HeadSpec, PathConfig, PathNetwork
from attnlab.paths.networks.kernels import PathGram, scaled_paths
from attnlab.paths.pruning.gradient_descent import GDNetwork, accuracy, load_checkpoint
from attnlab.paths.tasks.data import PathData, check_sizes


def load_trained(run: str | Path) -> GDNetwork:
    """The `gd_model` of a `paths prune` run folder (InputError naming the folder when it has none)."""
    path = Path(run) / "gd_model"
    if not path.with_suffix(".safetensors").is_file() or not path.with_suffix(".json").is_file():
        raise InputError(f"--from: {run} holds no gd_model.safetensors/.json (give a `paths prune` run folder)")
    return load_checkpoint(path)


def trained_maps(model: GDNetwork, x: np.ndarray) -> list[np.ndarray]:
    """Per layer, the trained network's attention [P, H, query, key] on x [P, n_tok, N0], in float64."""
    xt = torch.as_tensor(x, dtype=torch.float64)
    with torch.no_grad():
        Q = [q.detach().double() for q in model.Q]
        K = [k.detach().double() for k in model.K]
        out = []
        for l in range(model.L):
            q = torch.einsum("btd,hkd->bhtk", xt, Q[l])
            k = torch.einsum("btd,hkd->bhtk", xt, K[l])
            out.append(torch.softmax(q @ k.transpose(-1, -2) / np.sqrt(model.d_qk), dim=-1).numpy())
    return out


def precomputed_config(model: GDNetwork, maps: list[np.ndarray]) -> PathConfig:
    """A PathConfig of `precomputed` heads holding `maps` (one [P, n_tok, n_tok] array per head)."""
    layers = [
        [HeadSpec("precomputed", maps=maps[l][:, h], name=f"L{l + 1}H{h}") for h in range(model.H)]
        for l in range(model.L)
    ]
    return PathConfig(layers, tuple([10.0] * (model.L + 1)), tuple([1.0] * (model.L + 2)), model.readout)


def plugin_data(model: GDNetwork, P: int, n_test: int, memory_budget: float | None = None) -> tuple[PathData, float]:
    """PathData whose paths come from the trained maps on P training / n_test test digit episodes, and the
    network's own test accuracy."""
    from attnlab.paths.tasks.digits import N0, N_TOK, digit_episodes

    if model.N0 != N0:
        raise InputError(f"--from: the trained network takes N0 = {model.N0} features, the digit task has {N0}")
    mode = check_sizes(P, n_test, N_TOK, N0, [model.H] * model.L, "auto", memory_budget)
    xtr, ytr = digit_episodes(P, "train")
    xte, yte = digit_episodes(n_test, "test")
    xit = {}
    cfg = None
    for name, x in (("train", xtr), ("test", xte)):
        cfg = precomputed_config(model, trained_maps(model, x))
        xit[name] = scaled_paths(PathNetwork(cfg).paths(torch.tensor(x)), cfg.variances[0])
    assert cfg is not None
    data = PathData(cfg, PathGram(xit["train"], mode), xit["test"], ytr, yte, {}, "digits")
    return data, accuracy(model, xte, yte)


def handoff_gap(model: GDNetwork, x: np.ndarray) -> float:
    """max |precomputed paths - qk hand-off paths| on x: the two routes into the theory agree."""
    pre = precomputed_config(model, trained_maps(model, x))
    a = PathNetwork(pre).paths(torch.tensor(x))
    b = PathNetwork(model.to_config()).paths(torch.tensor(x))
    return float((a - b).abs().max())
