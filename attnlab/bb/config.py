"""Training configurations and the `cpu` / `paper` presets (spec extreme-tokens §4; choices in docs/extreme-tokens.md)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields

from attnlab.errors import AttnlabError

OPTIMIZERS = ("adam", "sgd")


@dataclass
class TrainConfig:
    """Everything that defines a BB training run. `lr=None` resolves from the optimiser and attention kind."""

    preset: str = "cpu"
    seed: int = 0
    # task
    corpus: str = "pydoc_data"
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
    no_attn: list[int] = field(default_factory=list)
    no_mlp: list[int] = field(default_factory=list)
    linear_mlp: list[int] = field(default_factory=list)
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
    threads: int = 0

    def resolved_lr(self) -> float:
        if self.lr is not None:
            return float(self.lr)
        if self.optimizer == "sgd":
            return 0.03
        if self.attention == "relu":
            return 3e-3
        return 1e-3 if self.preset == "cpu" else 3e-4

    def validate(self) -> "TrainConfig":
        if self.optimizer not in OPTIMIZERS:
            raise AttnlabError(f"optimizer {self.optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
        if self.steps < 1:
            raise AttnlabError(f"steps={self.steps} must be ≥ 1")
        for name in ("seq_len", "batch", "eval_batch", "lin_every", "per_decade", "ckpt_every", "keep_last"):
            if getattr(self, name) < 1:
                raise AttnlabError(f"{name}={getattr(self, name)} must be ≥ 1")
        if self.resolved_lr() <= 0:
            raise AttnlabError(f"lr={self.lr} must be positive")
        return self

    def to_dict(self) -> dict:
        d = asdict(self)
        d["lr"] = self.resolved_lr()
        d["betas"] = list(self.betas)
        return d

    def model_hash(self) -> str:
        """Hash of the fields that must not change on resume (everything but steps and bookkeeping)."""
        skip = {"steps", "ckpt_every", "keep_last", "threads"}
        d = {k: v for k, v in self.to_dict().items() if k not in skip}
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


PRESETS: dict[str, dict] = {
    # 1-layer phenomena on 2 CPU cores in about two minutes (measured numbers in docs/extreme-tokens.md).
    "cpu": dict(d_model=128, d_mlp=512, seq_len=64, batch=64, eval_batch=256, steps=2000,
                lin_every=25, lin_until=500, ckpt_every=500),
    # The paper's sizes (hours on a CPU).
    "paper": dict(d_model=256, d_mlp=1024, seq_len=256, batch=512, eval_batch=512, steps=10000,
                  lin_every=50, lin_until=1000, ckpt_every=1000),
}


def resolve_config(preset: str = "cpu", **overrides) -> TrainConfig:
    """Start from a preset and apply the non-None overrides."""
    if preset not in PRESETS:
        raise AttnlabError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")
    names = {f.name for f in fields(TrainConfig)}
    bad = [k for k in overrides if k not in names]
    if bad:
        raise AttnlabError(f"unknown training option {bad[0]!r}")
    values = {**PRESETS[preset], **{k: v for k, v in overrides.items() if v is not None}}
    return TrainConfig(preset=preset, **values).validate()


def config_from_dict(d: dict) -> TrainConfig:
    names = {f.name for f in fields(TrainConfig)}
    values = {k: v for k, v in d.items() if k in names}
    if "betas" in values:
        values["betas"] = tuple(values["betas"])
    return TrainConfig(**values).validate()
