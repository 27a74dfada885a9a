"""Issue 17, model folders: a broken model folder given to any real-model command is refused in one line naming
the file, before the model loads (`attnlab.hf.preflight`); so is a sequence past the model's positions."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import torch

from attnlab.errors import InputError
from tests.probes import refused
from tests.real.conftest import save_tiny_hf_folder

SMALL = ["--tokens", "16", "--samples", "1"]
OUT = ["--out", "{root}/run"]


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory) -> Path:
    return save_tiny_hf_folder(tmp_path_factory.mktemp("tiny-llama"), "llama")


def _edit_config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


def _truncate(folder: Path) -> None:
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def _garbage(folder: Path) -> None:
    (folder / "model.safetensors").write_bytes(b"not a safetensors file\n" * 64)


def _padded(folder: Path) -> None:
    with open(folder / "model.safetensors", "ab") as f:
        f.write(b"\0" * 100)


def _bad_json_header(folder: Path) -> None:
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 12) + b"{not json!!}" + b"\0" * 16)


def _shapes(folder: Path) -> None:
    _edit_config(folder, intermediate_size=64)  # the saved MLP weights are 48 wide


def _vocab(folder: Path) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / "model.safetensors"))
    small = {k: (v[:200].clone() if v.shape[0] == 259 else v) for k, v in tensors.items()}
    save_file(small, str(folder / "model.safetensors"), metadata={"format": "pt"})
    _edit_config(folder, vocab_size=200)  # weights and config agree; the 259-id tokenizer does not fit


def _pickle(folder: Path) -> None:
    from safetensors.torch import load_file

    torch.save(load_file(str(folder / "model.safetensors")), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()


def _no_weights(folder: Path) -> None:
    (folder / "model.safetensors").unlink()


def _missing_shard(folder: Path) -> None:
    index = {"metadata": {}, "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


def _huge(folder: Path) -> None:  # ~3.4e12 parameters: 13.5 TB of float32
    _edit_config(
        folder,
        hidden_size=65536,
        intermediate_size=262144,
        num_hidden_layers=64,
        num_attention_heads=512,
        num_key_value_heads=512,
    )


FAULTS = {  # name: (how the folder is broken, what the one line must name)
    "truncated": (_truncate, ["model.safetensors", "truncated"]),
    "garbage": (_garbage, ["model.safetensors", "not a readable safetensors file"]),
    "padded": (_padded, ["model.safetensors", "extra bytes"]),
    "json-header": (_bad_json_header, ["model.safetensors", "header is not JSON"]),
    "shapes": (_shapes, ["model.safetensors", "config.json implies [64, 32]", "gate_proj"]),
    "vocab": (_vocab, ["tokenizer.json", "259 token ids", "200 rows"]),
    "pickle": (_pickle, ["pytorch_model.bin", "pickle-format weights are not loaded"]),
    "no-weights": (_no_weights, ["has no model.safetensors"]),
    "missing-shard": (_missing_shard, ["model.safetensors.index.json", "model-00002-of-00002.safetensors"]),
    "huge": (_huge, ["config.json", "13.5 TB of float32 weights", "RAM available"]),
}
COMMANDS = {  # name: argv with {model} for the broken folder; {root}/good is an intact copy
    "scan": ["scan", "--model", "{model}", *SMALL, *OUT],
    "ablate": ["ablate", "--head", "0.0", "--model", "{model}", *SMALL, *OUT],
    "consensus model": ["consensus", "model", "--model", "{model}", "--seq-len", "16", "--prompts", "1", *OUT],
    "consensus norm": ["consensus", "norm", "--model", "{model}", "--seq-len", "16", "--prompts", "2", *OUT],
    "deploy quantize": ["deploy", "quantize", "--model", "{model}", *SMALL, *OUT],
    "deploy window": ["deploy", "window", "--model", "{model}", *SMALL, "--window", "8", *OUT],
    "series": ["scan", "--model", "{root}/good", "--model", "{model}", *SMALL, *OUT],
    "series folder": ["scan", "--model", "{root}/ckpts", *SMALL, *OUT],
}


def _broken_copy(good: Path, root: Path, fault: str, command: str) -> str:
    """Copy the good folder under `root`, break it with `fault`; the --model value that reaches it."""
    if command == "series folder":
        shutil.copytree(good, root / "ckpts" / "step_0")
        target = root / "ckpts" / "step_20"
    else:
        shutil.copytree(good, root / "good")
        target = root / "model"
    shutil.copytree(good, target)
    FAULTS[fault][0](target)
    return "{root}/ckpts" if command == "series folder" else str(target)


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_broken_model_folder_is_one_line(good_dir, tmp_path, capsys, command, fault):
    model = _broken_copy(good_dir, tmp_path, fault, command)
    argv = [a.replace("{model}", model) for a in COMMANDS[command]]
    message = refused(argv, tmp_path, capsys)
    for part in FAULTS[fault][1]:
        assert part in message, message
    assert "Traceback" not in message and "ignore_mismatched_sizes" not in message


CONTEXT = [  # a sequence past the model's 256 positions (max_position_embeddings)
    (["consensus", "model", "--seq-len", "1000", "--prompts", "1"], "--seq-len 1000"),
    (["consensus", "norm", "--seq-len", "1000", "--prompts", "2"], "--seq-len 1000"),
    (["scan", "--tokens", "300", "--samples", "1"], "--tokens 300"),
    (["ablate", "--head", "0.0", "--tokens", "300", "--samples", "1"], "--tokens 300"),
    (["deploy", "quantize", "--tokens", "300", "--samples", "1"], "--tokens 300"),
    (["deploy", "window", "--tokens", "300", "--samples", "1", "--window", "8"], "--tokens 300"),
]


@pytest.mark.parametrize("argv, flag", CONTEXT, ids=[" ".join(a[:2]) for a, _ in CONTEXT])
def test_sequence_past_the_models_positions(good_dir, tmp_path, capsys, argv, flag):
    folder = tmp_path / "model"
    shutil.copytree(good_dir, folder)
    _edit_config(folder, max_position_embeddings=256)
    message = refused([*argv, "--model", str(folder), *OUT], tmp_path, capsys)
    assert message.startswith(f"{flag} is longer than the model's context (max_position_embeddings = 256) in "), message
    assert str(folder / "config.json") in message, message


def test_intact_folder_passes_every_check(good_dir):
    from attnlab.hf.loader import check_model

    path, config, tokenizer = check_model(str(good_dir), seq_len=64)
    assert path == good_dir and config.vocab_size == len(tokenizer) == 259
    with pytest.raises(InputError, match="--tokens 65 is longer than the model's context"):
        check_model(str(good_dir), seq_len=65)


def test_header_reader(good_dir, tmp_path):
    from safetensors.torch import save_file

    from attnlab.hf.preflight import read_header

    header = read_header(good_dir / "model.safetensors")
    assert header["model.embed_tokens.weight"] == ("F32", (259, 32))
    save_file({"a": torch.zeros(3, 2), "b": torch.zeros(4, dtype=torch.bfloat16)}, str(tmp_path / "t.safetensors"))
    assert read_header(tmp_path / "t.safetensors") == {"a": ("F32", (3, 2)), "b": ("BF16", (4,))}
    # a byte range that does not fit its shape, and a gap between two tensors
    for offsets, match in (([[0, 20], [20, 28]], "does not fit it"), ([[0, 24], [28, 36]], "leave a gap")):
        meta = {"a": {"dtype": "F32", "shape": [3, 2], "data_offsets": offsets[0]}}
        meta["b"] = {"dtype": "F32", "shape": [2], "data_offsets": offsets[1]}
        raw = json.dumps(meta).encode()
        (tmp_path / "bad.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offsets[1][1])
        with pytest.raises(InputError, match=match):
            read_header(tmp_path / "bad.safetensors")
    (tmp_path / "short.safetensors").write_bytes(b"\1\2")
    with pytest.raises(InputError, match="shorter than the 8-byte header length"):
        read_header(tmp_path / "short.safetensors")


def test_memory_estimate_against_the_ram_given():
    from attnlab.hf.preflight import check_memory

    check_memory(10**9, "float32", Path("m/config.json"), ram=4 * 10**9)  # exactly fits
    check_memory(2 * 10**9, "bfloat16", Path("m/config.json"), ram=4 * 10**9)
    with pytest.raises(InputError, match=r"m/config.json implies 1.00 billion parameters = 4.0 GB of float32"):
        check_memory(10**9, "float32", Path("m/config.json"), ram=4 * 10**9 - 1)
