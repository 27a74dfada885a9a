"""`attnlab series train` settings: a frozen config, validated before any work (spec extreme-tokens §14, R25)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from attnlab.core.device import check_device
from attnlab.errors import check, check_choice, check_count, check_finite, check_int
from attnlab.runs import budget

ARCHS = ("gpt2", "llama")

# Finite ranges of the integer fields; sizes (2**40) are left to the memory estimate, which names the limit.
LIMITS = {"seed": 2**63 - 1, "vocab_chars": 0x110000, "n_triggers": 0x110000, "batch": 2**40, "eval_batch": 2**40,
          "n_layers": 1024, "n_heads": 1024, "d_model": 2**40, "d_mlp": 2**40, "steps": 10**8,
          "save_every": 10**8}  # fmt: skip
MAX_LR = 10.0

RESUMABLE = ("steps", "save_every")  # fields a resumed run may change (the rest is the checkpoints' config hash)


@dataclass(frozen=True)
class SeriesTrainConfig:
    """A small transformers GPT-2 or Llama trained on Bigram-Backcopy sequences (`attnlab.toy.task`, `<s>` at
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
    # issue 22 (absent: cpu); hashed with the checkpoints, so a resumed run keeps its device
    device: str = field(default="cpu", metadata={"omit_if_default": True})

    def __post_init__(self) -> None:
        check_device(self.device)
        for name, hi in LIMITS.items():
            check_count(getattr(self, name), 0 if name == "seed" else 1, name, hi)
        check_int(self.seq_len, 4, "seq_len", 4096)
        lr = check_finite(self.lr, "lr", positive=True)
        check(lr <= MAX_LR, f"lr must be in (0, {MAX_LR:g}] (an AdamW step moves each weight by about lr), got {lr:g}")
        wd = check_finite(self.weight_decay, "weight_decay")
        check(
            0 <= wd and lr * wd < 1,
            f"weight_decay must be >= 0 with lr x weight_decay < 1 (each step scales the weights by "
            f"1 - lr*weight_decay), got {self.weight_decay:g} at lr {lr:g}",
        )
        check(self.d_model % self.n_heads == 0, f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        check_choice(self.arch, ARCHS, "arch")
        check(
            self.arch != "llama" or (self.d_model // self.n_heads) % 2 == 0,
            f"d_model / n_heads = {self.d_model // self.n_heads} must be even (rotary embeddings)",
        )
        params = self.n_layers * (4 * self.d_model**2 + 3 * self.d_model * self.d_mlp)
        check(params <= 50_000_000, f"the model would have {params:,} block parameters; keep it under 50M (a CPU run)")
        self._check_budget()
        check(
            self.steps // self.save_every <= 1000,
            f"steps / save_every = {self.steps // self.save_every} checkpoints; keep it ≤ 1000",
        )

    def _check_budget(self) -> None:
        """Memory of one training step and a lower bound on the run time (`attnlab.runs.budget`), before any work."""
        vocab = self.vocab_chars + 2
        sizes = (vocab, self.d_model, self.n_layers, self.seq_len, self.d_mlp)
        nbytes = budget.transformer_train_bytes(*sizes, self.n_heads, max(self.batch, self.eval_batch))
        budget.check_memory(nbytes, f"series train --batch {self.batch} --seq-len {self.seq_len}")
        seconds = budget.min_seconds(self.steps, budget.transformer_step_flops(*sizes, self.batch))
        budget.check_time(seconds, f"series train --steps {self.steps}", "lower --steps or the model sizes")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
