"""Task data for the theory: task -> fixed attention -> scaled paths -> path Gram (spec §4, §9).

`PathData` holds the training Gram (scaled paths xit [P, n_paths, N0]), the test scaled paths
[n_test, n_paths, N0], the labels y in {+1, -1} and the network config. `build_data` checks memory from the
task's known shapes *before* drawing anything, so a size that cannot fit is refused in one line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import torch

from attnlab.errors import InputError, check
from attnlab.paths.config import TASKS, VARIANTS
from attnlab.paths.networks.architecture import HeadSpec, PathConfig, PathNetwork
from attnlab.paths.networks.kernels import PathGram, available_memory_bytes, check_memory, scaled_paths

# heads per layer of each Markov variant (markov_config builds the heads themselves)
VARIANT_HEADS = MappingProxyType({"4path": (2, 2), "2path": (2, 1), "good1": (1,), "good2": (1, 1)})


@dataclass
class PathData:
    """Everything the theory needs for one dataset (float64)."""

    cfg: PathConfig
    gram: PathGram
    xit_test: torch.Tensor
    y_train: np.ndarray
    y_test: np.ndarray
    baselines: dict[str, list[int]]
    task: str

    @property
    def P(self) -> int:
        return self.gram.P


def random_qk_layers(H: list[int], N0: int, d_qk: int, seed: int) -> list[list[HeadSpec]]:
    """Random qk heads with entries N(0, 1/N0) (the untrained digits baseline)."""
    rng = np.random.default_rng(seed)
    return [
        [
            HeadSpec(
                "qk",
                Q=rng.standard_normal((d_qk, N0)) / math.sqrt(N0),
                K=rng.standard_normal((d_qk, N0)) / math.sqrt(N0),
                name=f"L{l + 1}H{h}",
            )
            for h in range(n)
        ]
        for l, n in enumerate(H)
    ]


def task_shape(task: str, variant: str, heads: int, layers: int, cfg: PathConfig | None) -> tuple[int, int, list[int]]:
    """(n_tok, N0, heads per layer) of a task, known without drawing it."""
    if task == "markov":
        from attnlab.paths.tasks.markov import N0, N_TOK

        return N_TOK, N0, cfg.H if cfg is not None else list(VARIANT_HEADS[variant])
    from attnlab.paths.tasks.digits import N0 as D_N0
    from attnlab.paths.tasks.digits import N_TOK as D_N_TOK

    return D_N_TOK, D_N0, cfg.H if cfg is not None else [heads] * layers


def check_sizes(
    P: int, n_test: int, n_tok: int, N0: int, H: list[int], gram_mode: str = "auto", budget: float | None = None
) -> str:
    """Refuse, before anything is allocated, a problem whose arrays cannot fit; returns the Gram mode.

    Task arrays (inputs [P + n_test, n_tok, N0] with one temporary, paths [., n_paths, N0] twice, attention
    [., n_tok, n_tok] per head) are held against half the available memory; the kernels against the budget
    (`check_memory`, spec §12).
    """
    n_paths = math.prod(H)
    mode = check_memory(P, n_paths, N0, n_tok, sum(H), gram_mode, budget)
    examples = P + n_test
    need = 8 * examples * (2 * n_tok * N0 + 2 * n_paths * N0 + n_tok * n_tok * sum(H))
    limit = 0.5 * available_memory_bytes()
    if need > limit:
        raise InputError(
            f"estimated memory {need / 2**30:.3g} GiB for the task arrays (P={P}, n_test={n_test}) exceeds half "
            f"the available memory ({limit / 2**30:.3g} GiB); use a smaller --P or --n-test"
        )
    return mode


def build_data(
    task: str = "markov",
    P: int = 100,
    n_test: int = 1000,
    variant: str = "4path",
    heads: int = 2,
    layers: int = 2,
    d_qk: int = 16,
    seed: int = 0,
    cfg: PathConfig | None = None,
    memory_budget: float | None = None,
    gram_mode: str = "auto",
) -> PathData:
    """Check sizes, draw the task, compute the attention and paths once, and build the Gram."""
    check(task in TASKS, f"task must be one of {TASKS}, got {task!r}")
    check(task != "markov" or cfg is not None or variant in VARIANTS, f"variant must be one of {VARIANTS}")
    check(P >= 2, f"P: need at least 2 training examples, got {P}")
    check(n_test >= 2, f"n_test: need at least 2 test examples, got {n_test}")
    check(heads >= 1 and layers >= 1, f"heads and layers must be >= 1, got {heads}, {layers}")
    n_tok, N0, H = task_shape(task, variant, heads, layers, cfg)
    mode = check_sizes(P, n_test, n_tok, N0, H, gram_mode, memory_budget)
    if task == "markov":
        cfg, xtr, ytr, xte, yte, base = _markov(P, n_test, variant, cfg)
    else:
        cfg, xtr, ytr, xte, yte, base = _digits(P, n_test, heads, layers, d_qk, seed, cfg)
    net = PathNetwork(cfg)
    xit = scaled_paths(net.paths(torch.tensor(xtr)), cfg.variances[0])
    xit_test = scaled_paths(net.paths(torch.tensor(xte)), cfg.variances[0])
    return PathData(cfg, PathGram(xit, mode), xit_test, ytr, yte, base, task)


def _markov(P: int, n_test: int, variant: str, cfg: PathConfig | None) -> tuple:
    """(cfg, x_train, y_train, x_test, y_test, GP path subsets) of the Markov task (spec §9.1)."""
    from attnlab.paths.tasks.markov import markov_config, markov_task

    cfg = cfg or markov_config(variant)
    t = markov_task(P, n_test, sigma_out=5.0 if variant == "2path" else 1.0)
    base = {"g": [0], "g+d": [0, 2]} if variant == "4path" else ({"g": [0]} if variant == "2path" else {})
    return cfg, t.x_train, t.y_train, t.x_test, t.y_test, base


def _digits(P: int, n_test: int, heads: int, layers: int, d_qk: int, seed: int, cfg: PathConfig | None) -> tuple:
    """(cfg, x_train, y_train, x_test, y_test, {}) of the one-shot digit episodes (spec §9.2); random qk heads
    (seed + 1000) unless `cfg` is given."""
    from attnlab.paths.tasks.digits import N0, digit_episodes

    cfg = cfg or PathConfig(
        random_qk_layers([heads] * layers, N0, d_qk, seed + 1000),
        tuple([10.0] * (layers + 1)),
        tuple([1.0] * (layers + 2)),
        "mean",
    )
    xtr, ytr = digit_episodes(P, "train")
    xte, yte = digit_episodes(n_test, "test")
    return cfg, xtr, ytr, xte, yte, {}
