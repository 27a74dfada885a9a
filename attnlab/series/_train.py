"""The pieces of `series train`: a small transformers GPT-2 or Llama on Bigram-Backcopy, its character tokenizer,
optimiser, batches and loss, and the HF folder each checkpoint is (R25). The loop is `attnlab.training.loop`'s.

Step s means s updates done; checkpoint `checkpoints/step_s/` holds the model after update s (s = 0: the initial
model) as a HF folder (config.json, model.safetensors, the character tokenizer), plus optim.safetensors and
state.json (`attnlab.training.checkpoint`) so a run resumes from its latest checkpoint. Update k uses the BB batch of
(seed, index k), so a resumed run sees the batches it would have seen and, on one thread, reaches bit-identical
weights.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from attnlab.errors import InputError
from attnlab.series.config import SeriesTrainConfig
from attnlab.toy.task import BBTask, build_bb_task


def build_task(cfg: SeriesTrainConfig) -> BBTask:
    return build_bb_task(cfg.corpus, cfg.vocab_chars, cfg.n_triggers)


def char_tokenizer(task: BBTask) -> Any:
    """A fast tokenizer with one id per BB character (the task's ids), `<s>` as BOS and `<d>` as EOS/unknown."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    names = task.vocab.token_names()
    vocab = {c: i for i, c in enumerate(task.vocab.chars)}
    vocab.update({"<s>": task.vocab.bos, "<d>": task.vocab.delim})
    if len(vocab) != task.V:
        raise InputError(f"the BB vocabulary {names} has repeated names; cannot build a tokenizer")
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<d>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character a token
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="<d>", unk_token="<d>")


def build_model(cfg: SeriesTrainConfig, task: BBTask) -> Any:
    """A GPT2LMHeadModel or LlamaForCausalLM (`cfg.arch`) initialised from `cfg.seed` (inside `fork_rng`: the
    caller's generator is untouched)."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    common: dict[str, Any] = {"bos_token_id": task.vocab.bos, "eos_token_id": task.vocab.delim}
    common["tie_word_embeddings"] = False
    hf: Any
    if cfg.arch == "gpt2":
        hf = GPT2Config(
            vocab_size=task.V, n_embd=cfg.d_model, n_layer=cfg.n_layers, n_head=cfg.n_heads, n_inner=cfg.d_mlp,
            n_positions=cfg.seq_len, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **common,
        )  # fmt: skip
    else:
        hf = LlamaConfig(
            vocab_size=task.V, hidden_size=cfg.d_model, intermediate_size=cfg.d_mlp, num_hidden_layers=cfg.n_layers,
            num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_heads, max_position_embeddings=cfg.seq_len,
            **common,
        )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        return (GPT2LMHeadModel if cfg.arch == "gpt2" else LlamaForCausalLM)(hf)


def make_optimizer(model: torch.nn.Module, cfg: SeriesTrainConfig) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.99), weight_decay=cfg.weight_decay)


def batch(task: BBTask, cfg: SeriesTrainConfig, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs [B,T], targets [B,T]) of update `step`: x_{0:T} (x_0 = `<s>`) and x_{1:T+1}."""
    x = torch.as_tensor(task.train_batch(cfg.batch, cfg.seq_len, cfg.seed, step))
    return x[:, :-1], x[:, 1:]


def loss_of(model: Any, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=inputs, use_cache=False).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def hf_writer(tokenizer: Any) -> Callable[[Any, Path], None]:
    """The checkpoint's model writer (`attnlab.training.checkpoint.WriteModel`): a complete HF folder (config.json,
    model.safetensors, the tokenizer), so `attnlab scan --model RUN/checkpoints` loads each step as a model."""

    def write(model: Any, folder: Path) -> None:
        from attnlab.hf.loader import no_progress_bars

        with no_progress_bars():
            model.save_pretrained(str(folder), safe_serialization=True)
        tokenizer.save_pretrained(str(folder))

    return write
