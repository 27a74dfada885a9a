"""Training: presets, log-spaced snapshot schedule, safetensors checkpoints with resume, NaN guard."""

from attnlab.train.presets import PRESETS, TrainConfig, resolve_config

__all__ = ["PRESETS", "TrainConfig", "resolve_config"]
