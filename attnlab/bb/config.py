"""Configs of `attnlab bb {sample,train,intervene,theory,compare}`: frozen, validated, one per subcommand.

Every field is checked in `__post_init__`; a bad value is a one-line `InputError` naming the field. Sizes that
would not fit in memory or could not finish are refused here, before any work (`attnlab.runs.budget`: half the
machine's RAM, and a lower bound on the run time against 30 days); every number has a finite range.
`TrainConfig` holds the resolved values of a preset (`resolve_config("cpu", steps=...)`); its `lr` is resolved
from the optimiser and attention kind when not given (choices in docs/extreme-tokens.md).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.core.device import check_device
from attnlab.errors import InputError, check, check_choice, check_count, check_finite, check_int, folders
from attnlab.runs import budget

OPTIMIZERS = ("adam", "sgd")
ATTENTION_KINDS = ("softmax", "relu")
BLOCKS = ("sequential", "parallel")  # x += Attn(LN₁x); x += MLP(LN₂x)  |  x += Attn(LN x) + MLP(LN x)
PRECISIONS = ("fp32", "tf32", "bf16")  # float32 | float32 with TF32 matmuls on CUDA | bf16 autocast on CUDA
DEFAULT_CORPUS = "pydoc_data"
T_MAX_LIMIT = 1e15  # `bb theory`: LSODA's step count grows with log t_max; 1e15 still runs in seconds

PRESETS: dict[str, dict] = {
    # 1-layer phenomena on 2 CPU cores in about two minutes (measured numbers in docs/extreme-tokens.md).
    "cpu": dict(
        d_model=128,
        d_mlp=512,
        seq_len=64,
        batch=64,
        eval_batch=256,
        steps=2000,
        lin_every=25,
        lin_until=500,
        ckpt_every=500,
    ),
    # The paper's sizes (hours on a CPU).
    "paper": dict(
        d_model=256,
        d_mlp=1024,
        seq_len=256,
        batch=512,
        eval_batch=512,
        steps=10000,
        lin_every=50,
        lin_until=1000,
        ckpt_every=1000,
    ),
}


# Finite ranges of the training fields (far above any run of the study; the memory and time estimates below
# refuse most large combinations first).
MAX_STEPS = 10**12  # optimiser steps; the time bound (attnlab.runs.budget) refuses far fewer at any model size
MAX_SIZE = 2**40  # d_model, d_mlp, seq_len, batch sizes: left to the memory estimate, which gives both numbers
MAX_LAYERS = 1024  # n_layers, n_heads
MAX_VOCAB = 0x110000  # vocab_chars, n_triggers: the number of Unicode code points
MAX_SEED = 2**63 - 1  # torch and numpy seeds are 64-bit
MAX_LR = 10.0  # one step of Adam moves every weight by about lr; above 10 it is noise of that size


def _check_memory(estimate: float, what: str) -> None:
    budget.check_memory(estimate, what)


def _vocab_size(vocab_chars: int) -> int:
    return (vocab_chars or 1024) + 2  # 0 keeps every character: assume a large alphabet for the estimate


@dataclass(frozen=True)
class SampleConfig:
    """`bb sample`: `n` sequences of T+1 tokens (T = `seq_len`) from the BB law of `corpus`."""

    n: int = 512
    seq_len: int = 256
    seed: int = 0
    corpus: str = DEFAULT_CORPUS
    vocab_chars: int = 64
    triggers: int = 3

    def __post_init__(self) -> None:
        check_count(self.n, 1, "n", 10**12)
        check_count(self.seq_len, 2, "seq_len", MAX_SIZE)
        check_count(self.seed, 0, "seed", MAX_SEED)
        check_count(self.vocab_chars, 0, "vocab_chars", MAX_VOCAB)
        check_count(self.triggers, 1, "triggers", MAX_VOCAB)
        # sampler: uniforms, keys, bins, columns, output (5 x 8 bytes per token); statistics: the oracle [n,T,V]
        tokens = self.n * (self.seq_len + 1)
        _check_memory(
            tokens * (40 + 16 * _vocab_size(self.vocab_chars)), f"bb sample --n {self.n} --seq-len {self.seq_len}"
        )


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a BB training run (spec extreme-tokens §3-§4). `lr=None` resolves to the default
    of the optimiser and attention kind (adam 1e-3 cpu / 3e-4 paper, relu 3e-3, sgd 0.03)."""

    preset: str = "cpu"
    seed: int = 0
    # task
    corpus: str = DEFAULT_CORPUS
    vocab_chars: int = 64
    n_triggers: int = 3
    seq_len: int = 64
    batch: int = 64
    eval_batch: int = 256
    eval_seed: int = 27
    # model
    n_layers: int = 1
    n_heads: int = 1
    d_model: int = 128
    d_mlp: int = 512
    attention: str = "softmax"
    no_attn: tuple[int, ...] = ()
    no_mlp: tuple[int, ...] = ()
    linear_mlp: tuple[int, ...] = ()
    # "parallel": attention and MLP read one LN of the same input and add together (R19); left out of the config's
    # JSON and hashes when "sequential", so every earlier run keeps its hash
    block: str = field(default="sequential", metadata={"omit_if_default": True})
    # optimiser
    optimizer: str = "adam"
    lr: float | None = None
    weight_decay: float = 1e-4
    betas: tuple[float, float] = (0.9, 0.99)
    eps: float = 1e-8
    momentum: float = 0.9
    steps: int = 2000
    # snapshots and checkpoints
    lin_every: int = 25
    lin_until: int = 500
    per_decade: int = 16
    ckpt_every: int = 500
    keep_last: int = 2
    log: tuple[str, ...] = ()  # experiment trackers mirroring metrics.jsonl: "tensorboard", "mlflow"
    # device and precision (issue 22): left out of config.json at their defaults (cpu, fp32), so CPU runs keep
    # their files and hashes; the resolved device is in manifest.json. The device is not hashed: a run may resume
    # on another device (results then agree within the stated tolerance, not bit for bit)
    device: str = field(default="cpu", metadata={"omit_if_default": True})
    precision: str = field(default="fp32", metadata={"omit_if_default": True})

    def __post_init__(self) -> None:
        from attnlab.core.tracking import check_trackers

        check_device(self.device)
        check_choice(self.precision, PRECISIONS, "precision")
        check(
            self.precision == "fp32" or self.device != "cpu",
            f"precision {self.precision} is a CUDA mode (TF32 matmuls / bf16 autocast); on the cpu use fp32",
        )

        object.__setattr__(self, "log", check_trackers(self.log))
        check_choice(self.preset, tuple(PRESETS), "preset")
        check_choice(self.optimizer, OPTIMIZERS, "optimizer")
        check_choice(self.attention, ATTENTION_KINDS, "attention")
        check_choice(self.block, BLOCKS, "block")
        for name in ("no_attn", "no_mlp", "linear_mlp", "betas"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.lr is None:
            object.__setattr__(self, "lr", default_lr(self.preset, self.optimizer, self.attention))
        self._check_numbers()
        self._check_layers()
        _check_memory(train_memory(self), "this training run")
        budget.check_time(train_seconds(self), f"bb train --steps {self.steps}", "lower --steps or the model sizes")

    def _check_numbers(self) -> None:
        limits = {"seed": (0, MAX_SEED), "eval_seed": (0, MAX_SEED), "vocab_chars": (0, MAX_VOCAB),
                  "n_triggers": (1, MAX_VOCAB), "seq_len": (2, MAX_SIZE), "lin_until": (0, MAX_STEPS),
                  "per_decade": (1, 1000), "keep_last": (1, 1000)}  # fmt: skip
        limits |= {k: (1, MAX_SIZE) for k in ("batch", "eval_batch", "d_model", "d_mlp")}
        limits |= {k: (1, MAX_LAYERS) for k in ("n_layers", "n_heads")}
        limits |= {k: (1, MAX_STEPS) for k in ("steps", "lin_every", "ckpt_every")}
        for name, (lo, hi) in limits.items():
            check_count(getattr(self, name), lo, name, hi)
        lr = check_finite(self.lr, "lr", positive=True)  # type: ignore[arg-type]
        check(lr <= MAX_LR, f"lr must be in (0, {MAX_LR:g}] (a step moves each weight by about lr), got {lr:g}")
        check(0 < check_finite(self.eps, "eps") <= 1, f"eps must be in (0, 1], got {self.eps}")
        wd = check_finite(self.weight_decay, "weight_decay")
        check(
            0 <= wd and lr * wd < 1,
            f"weight_decay must be >= 0 with lr x weight_decay < 1 (each step scales the weights by "
            f"1 - lr*weight_decay), got {self.weight_decay:g} at lr {lr:g}",
        )
        check(0 <= check_finite(self.momentum, "momentum") < 1, f"momentum must be in [0, 1), got {self.momentum}")
        check(
            len(self.betas) == 2 and all(0 <= check_finite(b, "betas") < 1 for b in self.betas),
            f"betas must be two numbers in [0, 1), got {self.betas}",
        )

    def _check_layers(self) -> None:
        check(self.d_model % self.n_heads == 0, f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        for name in ("no_attn", "no_mlp", "linear_mlp"):
            for layer in getattr(self, name):
                check_int(layer, 0, f"{name} layer", self.n_layers - 1)

    def resolved_lr(self) -> float:
        return float(self.lr)  # type: ignore[arg-type]

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        for name in ("no_attn", "no_mlp", "linear_mlp", "betas", "log"):
            d[name] = list(d[name])
        for name, default in (("block", "sequential"), ("device", "cpu"), ("precision", "fp32")):
            if d[name] == default:
                del d[name]
        return d


def default_lr(preset: str, optimizer: str, attention: str) -> float:
    """The learning rate a run gets when none is given."""
    if optimizer == "sgd":
        return 0.03
    if attention == "relu":
        return 3e-3
    return 1e-3 if preset == "cpu" else 3e-4


def train_memory(cfg: TrainConfig) -> float:
    """Rough bytes of a training run: weights, grads and Adam moments, plus float32 activations of a training
    step (residual/MLP streams and the [B,H,T,T] scores and patterns kept for backward) and of an eval chunk."""
    V, T = _vocab_size(cfg.vocab_chars), cfg.seq_len
    batch = max(cfg.batch, min(cfg.eval_batch, 256))
    step = budget.transformer_train_bytes(V, cfg.d_model, cfg.n_layers, T, cfg.d_mlp, cfg.n_heads, batch)
    return step + 8.0 * cfg.eval_batch * T * V * 2


def intervene_memory(cfg: TrainConfig) -> float:
    """Rough bytes of `bb intervene` on a device: the float32 weights and one evaluation forward of the whole
    evaluation batch N (one chunk: the query masks are batch-aligned). Per layer, freed before the next: the
    [N,H,T,T] scores, pattern and moved pattern (float32) and the trace's float64 reductions of them (about five
    [N,H,T,T] float64 tensors at once); the [N,T,D]/[N,T,d_mlp] streams of a block; the logits [N,T,V] (kept,
    then concatenated)."""
    V, T, D, N = _vocab_size(cfg.vocab_chars), cfg.seq_len, cfg.d_model, cfg.eval_batch
    params = 2 * V * D + T * D + cfg.n_layers * (4 * D * D + 2 * D * cfg.d_mlp)
    attention = N * cfg.n_heads * T * T * (3 * 4 + 5 * 8)
    streams = N * T * (10 * D + 2 * cfg.d_mlp) * 4
    return 4.0 * params + attention + streams + 2 * 4.0 * N * T * V


def train_seconds(cfg: TrainConfig) -> float:
    """A lower bound on the training time (`attnlab.runs.budget.min_seconds`; evaluations not counted)."""
    V = _vocab_size(cfg.vocab_chars)
    flops = budget.transformer_step_flops(V, cfg.d_model, cfg.n_layers, cfg.seq_len, cfg.d_mlp, cfg.batch)
    return budget.min_seconds(cfg.steps, flops)


TRAIN_HASH_SKIP = ("steps", "ckpt_every", "keep_last", "log", "device")  # log: trackers change no result


def train_hash(cfg: TrainConfig) -> str:
    """Hash of the fields that must not change on resume (everything but steps and checkpoint bookkeeping)."""
    from attnlab.runs import config_hash

    return config_hash({k: v for k, v in cfg.to_dict().items() if k not in TRAIN_HASH_SKIP})


def resolve_config(preset: str = "cpu", **overrides: object) -> TrainConfig:
    """A `TrainConfig` from a preset's sizes with the non-None `overrides` applied."""
    check_choice(preset, tuple(PRESETS), "preset")
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    bad = [k for k in overrides if k not in names]
    if bad:
        raise InputError(f"unknown training option {bad[0]!r}")
    values = {**PRESETS[preset], **{k: v for k, v in overrides.items() if v is not None}}
    return TrainConfig(preset=preset, **values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class InterveneConfig:
    """`bb intervene`: risks of the final model of the `bb train` run in `run_dir` under each intervention. On a
    CUDA `device` the forwards and the attention reductions run there (issue 22); left out of config.json at cpu."""

    run_dir: str
    device: str = field(default="cpu", metadata={"omit_if_default": True})

    def __post_init__(self) -> None:
        check(str(self.run_dir).strip() != "", "run_dir is an empty path; name a `bb train` run folder")
        check_device(self.device)
        read_train_config(self.run_dir)  # a missing, corrupt or other study's folder: one line, before any work


@dataclass(frozen=True)
class SubspaceConfig:
    """`bb subspace`: principal angles between the attention and MLP output subspaces of layer `layer` of the
    final model of `run_dir` on its evaluation batch (k by `energy` of the squared singular values; R19)."""

    run_dir: str
    layer: int = 0
    energy: float = 0.95

    def __post_init__(self) -> None:
        check(str(self.run_dir).strip() != "", "run_dir is an empty path; name a `bb train` run folder")
        check_count(self.layer, 0, "layer", MAX_LAYERS - 1)
        energy = check_finite(self.energy, "energy")
        check(0 < energy <= 1, f"energy must be in (0, 1], got {energy:g}")
        read_train_config(self.run_dir)


@dataclass(frozen=True)
class TheoryConfig:
    """`bb theory`: the §9 flow integrated to `t_max` (late window [t_max/10, t_max]); `seed` draws p_v, π, ξ."""

    seed: int = 0
    t_max: float = 1e9

    def __post_init__(self) -> None:
        check_count(self.seed, 0, "seed", MAX_SEED)
        t_max = check_finite(self.t_max, "t_max")
        check(
            1e5 <= t_max <= T_MAX_LIMIT,
            f"t_max={t_max:g} is out of range; need 1e5 <= t_max <= {T_MAX_LIMIT:g} so the late window "
            f"[t_max/10, t_max] follows the transient window [1e3, 1e4] and the integration ends in seconds",
        )


@dataclass(frozen=True)
class CompareConfig:
    """`bb compare`: metrics of several `bb train` runs overlaid, for layer `layer` (head 0)."""

    run_dirs: tuple[str, ...] = field(default_factory=tuple)
    layer: int = 0
    title: str = "BB runs compared"

    def __post_init__(self) -> None:
        object.__setattr__(self, "run_dirs", folders(self.run_dirs))
        check(len(self.run_dirs) >= 1, "run_dirs: name at least one `bb train` run folder")
        seen: dict[str, str] = {}
        for d in self.run_dirs:
            check(str(d).strip() != "", "run_dirs: one is an empty path; name `bb train` run folders")
            key = os.path.realpath(d)
            check(key not in seen, f"run_dirs: {d} is given twice (as {seen.get(key)}); compare different runs")
            seen[key] = d
        check_count(self.layer, 0, "layer", MAX_LAYERS - 1)


def read_train_config(run_dir: str | Path) -> TrainConfig:
    """The `TrainConfig` of a `bb train` run folder; one line if it is another study's run or is corrupt. Reads two
    small JSON files and imports no torch, so configs that name a training run check it before any work."""
    from attnlab.runs import RunDir, read_json, recover_replaced
    from attnlab.runs.configs import config_from_dict

    run = RunDir(run_dir)
    recover_replaced(run.path)  # a run that a killed --overwrite set aside is back before it is read
    if not run.path.is_dir():
        raise InputError(f"{run.path} is not a folder; expected a `bb train` run folder")
    if (run.path / "manifest.json").exists():
        command = run.read_manifest().get("command")
        if command not in (None, "bb train"):
            raise InputError(f"{run.path} is a run of `attnlab {command}`, not of `attnlab bb train`")
    data = read_json(run.path / "config.json", "run config")
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if k != "threads"}  # runs written before issue 8
    try:
        return config_from_dict(TrainConfig, data)
    except InputError as exc:
        raise InputError(f"{run.path} is not a `bb train` run folder ({exc})") from None
