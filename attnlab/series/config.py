"""`attnlab series train` settings: a frozen config, validated before any work (spec extreme-tokens §14, R25)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from attnlab.errors import check, check_choice, check_finite, check_int

ARCHS = ("gpt2", "llama")

RESUMABLE = ("steps", "save_every")  # fields a resumed run may change


@dataclass(frozen=True)
class SeriesTrainConfig:
    """A small transformers GPT-2 or Llama trained on Bigram-Backcopy sequences (`attnlab.bb.task`, `<s>` at
    position 0), saved as a HF checkpoint every `save_every` steps (and at step 0 and the last step).

    Task: `vocab_chars` characters of `corpus` (None: the BB default), `n_triggers` triggers, sequences of
    `seq_len` tokens, `batch` sequences per step (batch of step k: seed `seed`, index k, so resuming needs no
    sampler state). Model (`arch`): "gpt2" (GPT2LMHeadModel: learned positions, LayerNorm, GELU MLP, no dropout)
    or "llama" (LlamaForCausalLM: RoPE, RMSNorm, SwiGLU MLP), `n_layers` blocks of width `d_model`, `n_heads`
    heads, MLP width `d_mlp`, untied embeddings, transformers' initialisation. AdamW at `lr` (betas 0.9/0.99,
    `weight_decay`). The defaults (GPT-2, 3 layers, one head, width 64) are those with which a sink formed here
    within 800 steps; the Llama formed a weak one only (docs/real-models.md).
    """

    seed: int = 0
    arch: str = "gpt2"
    corpus: str | None = None
    vocab_chars: int = 64
    n_triggers: int = 3
    seq_len: int = 64
    batch: int = 32
    n_layers: int = 3
    n_heads: int = 1
    d_model: int = 64
    d_mlp: int = 256
    lr: float = 1e-3
    weight_decay: float = 1e-4
    steps: int = 800
    save_every: int = 20
    eval_batch: int = 64

    def __post_init__(self) -> None:
        for name in ("vocab_chars", "n_triggers", "batch", "n_layers", "n_heads", "d_model", "d_mlp", "steps"):
            check_int(getattr(self, name), 1, name)
        check_int(self.seed, 0, "seed")
        check_int(self.seq_len, 4, "seq_len", 4096)
        check_int(self.save_every, 1, "save_every")
        check_int(self.eval_batch, 1, "eval_batch")
        check_finite(self.lr, "lr", positive=True)
        check(check_finite(self.weight_decay, "weight_decay") >= 0, "weight_decay must be >= 0")
        check(self.d_model % self.n_heads == 0, f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        check_choice(self.arch, ARCHS, "arch")
        check(
            self.arch != "llama" or (self.d_model // self.n_heads) % 2 == 0,
            f"d_model / n_heads = {self.d_model // self.n_heads} must be even (rotary embeddings)",
        )
        params = self.n_layers * (4 * self.d_model**2 + 3 * self.d_model * self.d_mlp)
        check(params <= 50_000_000, f"the model would have {params:,} block parameters; keep it under 50M (a CPU run)")
        check(
            self.steps // self.save_every <= 1000,
            f"steps / save_every = {self.steps // self.save_every} checkpoints; keep it ≤ 1000",
        )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def frozen_part(self) -> dict:
        """The fields a resumed run may not change."""
        return {k: v for k, v in self.to_dict().items() if k not in RESUMABLE}
