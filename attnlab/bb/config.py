"""Configs of `attnlab bb {sample,train,intervene,theory,compare}`: frozen, validated, one per subcommand.

Every field is checked in `__post_init__`; a bad value is a one-line `InputError` naming the field. Sizes that
would not fit in memory are refused here, before any work (`memory_limit()`: half the machine's RAM).
`TrainConfig` holds the resolved values of a preset (`resolve_config("cpu", steps=...)`); its `lr` is resolved
from the optimiser and attention kind when not given (choices in docs/extreme-tokens.md).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from attnlab.errors import InputError, check, check_choice, check_finite, check_int

OPTIMIZERS = ("adam", "sgd")
ATTENTION_KINDS = ("softmax", "relu")
BLOCKS = ("sequential", "parallel")  # x += Attn(LN₁x); x += MLP(LN₂x)  |  x += Attn(LN x) + MLP(LN x)
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


def memory_limit() -> int:
    """Bytes a single command may plan to use: half the physical memory (8 GiB if unknown)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2)
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def _check_memory(estimate: float, what: str) -> None:
    limit = memory_limit()
    check(
        estimate <= limit,
        f"{what} would need about {estimate / 2**30:.3g} GiB of memory (limit "
        f"{limit / 2**30:.3g} GiB, half this machine's RAM); choose smaller sizes",
    )


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
        check_int(self.n, 1, "n")
        check_int(self.seq_len, 2, "seq_len")
        check_int(self.seed, 0, "seed")
        check_int(self.vocab_chars, 0, "vocab_chars")
        check_int(self.triggers, 1, "triggers")
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

    def __post_init__(self) -> None:
        from attnlab.tracking import check_trackers

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

    def _check_numbers(self) -> None:
        for name in ("seed", "vocab_chars", "eval_seed"):
            check_int(getattr(self, name), 0, name)
        for name in (
            "n_triggers",
            "batch",
            "eval_batch",
            "n_layers",
            "n_heads",
            "d_model",
            "d_mlp",
            "steps",
            "lin_every",
            "per_decade",
            "ckpt_every",
            "keep_last",
        ):
            check_int(getattr(self, name), 1, name)
        check_int(self.seq_len, 2, "seq_len")
        check_int(self.lin_until, 0, "lin_until")
        check_finite(self.lr, "lr", positive=True)  # type: ignore[arg-type]
        check_finite(self.eps, "eps", positive=True)
        check(check_finite(self.weight_decay, "weight_decay") >= 0, "weight_decay must be >= 0")
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
        if self.block == "sequential":
            del d["block"]
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
    V, D, L, T = _vocab_size(cfg.vocab_chars), cfg.d_model, cfg.n_layers, cfg.seq_len
    params = 2 * V * D + T * D + L * (4 * D * D + 2 * D * cfg.d_mlp)
    per_seq = T * L * (12 * D + 2 * cfg.d_mlp) + 4 * L * cfg.n_heads * T * T + 2 * T * V
    batch = max(cfg.batch, min(cfg.eval_batch, 256))
    return 4.0 * (4 * params + per_seq * batch) + 8.0 * cfg.eval_batch * T * V * 2


TRAIN_HASH_SKIP = ("steps", "ckpt_every", "keep_last", "log")  # log: trackers change no result


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
    """`bb intervene`: risks of the final model of the `bb train` run in `run_dir` under each intervention."""

    run_dir: str

    def __post_init__(self) -> None:
        check(str(self.run_dir).strip() != "", "run_dir must name a `bb train` run folder")


@dataclass(frozen=True)
class SubspaceConfig:
    """`bb subspace`: principal angles between the attention and MLP output subspaces of layer `layer` of the
    final model of `run_dir` on its evaluation batch (k by `energy` of the squared singular values; R19)."""

    run_dir: str
    layer: int = 0
    energy: float = 0.95

    def __post_init__(self) -> None:
        check(str(self.run_dir).strip() != "", "run_dir must name a `bb train` run folder")
        check_int(self.layer, 0, "layer")
        energy = check_finite(self.energy, "energy")
        check(0 < energy <= 1, f"energy must be in (0, 1], got {energy:g}")


@dataclass(frozen=True)
class TheoryConfig:
    """`bb theory`: the §9 flow integrated to `t_max` (late window [t_max/10, t_max]); `seed` draws p_v, π, ξ."""

    seed: int = 0
    t_max: float = 1e9

    def __post_init__(self) -> None:
        check_int(self.seed, 0, "seed")
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
        object.__setattr__(self, "run_dirs", tuple(str(d) for d in self.run_dirs))
        check(len(self.run_dirs) >= 1, "run_dirs: name at least one `bb train` run folder")
        check_int(self.layer, 0, "layer")
