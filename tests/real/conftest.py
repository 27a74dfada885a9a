"""Shared fixtures for tests/real: a byte-level stand-in tokenizer and tiny random HF models built from configs."""

from __future__ import annotations

import pytest
import torch


class ByteTokenizer:
    """Stand-in tokenizer: one id per UTF-8 byte + 3 (ids 0-2 are special)."""

    all_special_ids = [0, 1, 2]

    def __call__(self, text: str, add_special_tokens: bool = False):
        return {"input_ids": [b + 3 for b in text.encode("utf-8")]}

    def __len__(self) -> int:
        return 259

    def decode(self, ids) -> str:
        return bytes(int(i) - 3 for i in ids if int(i) >= 3).decode("utf-8", errors="replace")


@pytest.fixture
def byte_tokenizer() -> ByteTokenizer:
    return ByteTokenizer()


def tiny_llama(n_heads: int = 4, n_kv: int = 2, layers: int = 2, seed: int = 0, max_positions: int = 64):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=layers,
        num_attention_heads=n_heads,
        num_key_value_heads=n_kv,
        max_position_embeddings=max_positions,
    )
    return LlamaForCausalLM(cfg).eval()


def tiny_gpt2(n_heads: int = 2, layers: int = 2, seed: int = 0):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(
        vocab_size=64, n_embd=32, n_layer=layers, n_head=n_heads, n_positions=64, bos_token_id=0, eos_token_id=0
    )
    return GPT2LMHeadModel(cfg).eval()


def byte_level_tokenizer():
    """A fast byte-level tokenizer with 259 ids (3 specials + 256 bytes), and its vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2}
    vocab.update({ch: i + 3 for i, ch in enumerate(sorted(alphabet))})
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    return tok, vocab


def save_tiny_hf_folder(path, kind: str = "llama"):
    """Save a tiny random causal LM with a byte-level tokenizer (259 ids: 3 specials + 256 bytes) to `path`."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    tok, vocab = byte_level_tokenizer()
    torch.manual_seed(0)
    if kind == "llama":
        cfg = LlamaConfig(
            vocab_size=len(vocab),
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
        )
        model = LlamaForCausalLM(cfg)
    else:
        cfg = GPT2Config(
            vocab_size=len(vocab), n_embd=32, n_layer=2, n_head=2, n_positions=64, bos_token_id=1, eos_token_id=2
        )
        model = GPT2LMHeadModel(cfg)
    model.save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return path
