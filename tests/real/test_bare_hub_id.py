"""Bare hub ids (`gpt2`, no org) are hub ids like `org/name` (issue 21, first contact); no network: the model is
read from a Hugging Face cache built by the test, and a bare id missing from it is one line offline."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from attnlab.errors import InputError
from attnlab.hf.loader import is_hub_id, load_causal_lm
from tests.real.conftest import save_tiny_hf_folder


@pytest.mark.parametrize("model", ["gpt2", "distilgpt2", "org/name", "EleutherAI/pythia-70m", "a.b_c-d", "x"])
def test_hub_shaped_names_are_hub_ids(model):
    assert is_hub_id(model)


@pytest.mark.parametrize("model", ["smollm2", "a/b/c", "-gpt2", "gpt2-", "a--b", "a..b", "./gpt2", "~/m", "", "a b"])
def test_other_names_are_not_hub_ids(model):
    assert not is_hub_id(model)


def test_an_existing_folder_is_not_a_hub_id(tmp_path, monkeypatch):
    (tmp_path / "gpt2").mkdir()
    monkeypatch.chdir(tmp_path)
    assert not is_hub_id("gpt2")


def _offline_cache(monkeypatch, root):
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(root))


def test_bare_hub_id_loads_from_the_cache_offline(tmp_path, monkeypatch):
    """`tiny-gpt` (no org) is found in the cache as `models--tiny-gpt`, as the hub stores `gpt2`."""
    src = save_tiny_hf_folder(tmp_path / "src", "gpt2")
    repo = tmp_path / "hub" / "models--tiny-gpt"
    shutil.copytree(src, repo / "snapshots" / ("c" * 40))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("c" * 40)
    _offline_cache(monkeypatch, tmp_path / "hub")
    lm = load_causal_lm("tiny-gpt")
    assert lm.name == "tiny-gpt" and lm.path == repo / "snapshots" / ("c" * 40)
    assert type(lm.model).__name__ == "GPT2LMHeadModel"


def test_bare_hub_id_missing_offline_is_one_line(tmp_path, monkeypatch):
    _offline_cache(monkeypatch, tmp_path / "hub")
    with pytest.raises(InputError) as info:
        load_causal_lm("gpt2")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("unknown model 'gpt2': no such local folder, not in the Hugging Face cache")
    assert message.endswith("local names: smollm2")


def test_smollm2_conversion_says_so_and_shows_a_progress_bar(tmp_path, monkeypatch, capsys):
    """The first SmolLM2 load converts the GGUF file (about a minute): a message and a bar over its stages on
    stderr. transformers' readers are stood in for by fakes that save a file each (no GGUF is read here)."""
    import transformers

    from attnlab.hf import loader

    gguf = tmp_path / "pkg" / loader.SMOLLM2_GGUF
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")

    class Saved:
        config = type("Config", (), {})()

        def __init__(self, name):
            self.name = name

        def save_pretrained(self, folder, **kwargs):
            (Path(folder) / self.name).write_text("x")

    fake = type("Auto", (), {})
    monkeypatch.setattr(loader, "smollm2_gguf_path", lambda: gguf)
    monkeypatch.setattr(loader, "_require_gguf_deps", lambda: None)
    monkeypatch.setattr(transformers, "AutoModelForCausalLM", fake, raising=False)
    monkeypatch.setattr(transformers, "AutoTokenizer", fake, raising=False)
    calls = iter([Saved("model.safetensors"), Saved("tokenizer.json")])
    fake.from_pretrained = staticmethod(lambda *a, **k: next(calls))
    folder = loader.smollm2_folder(tmp_path / "cache")
    assert {p.name for p in folder.iterdir()} == {"model.safetensors", "tokenizer.json", "attnlab.json"}
    err = capsys.readouterr().err
    assert f"attnlab: converting SmolLM2 from {gguf.name} to an fp32 folder in {folder} (once;" in err
    n = len(loader.CONVERT_STAGES)
    assert "converting SmolLM2: 100%" in err and f"{n}/{n}" in err
    assert loader.smollm2_folder(tmp_path / "cache") == folder  # converted once: the second call says nothing
    assert capsys.readouterr().err == ""
