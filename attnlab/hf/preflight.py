"""A model folder checked before its weights are loaded: one-line `InputError`s naming the file at fault.

`check_folder(path, config, tokenizer, ...)` refuses, in this order:
- a sequence length past the model's positions (`max_position_embeddings` of config.json);
- a config whose parameters would not fit the available RAM (estimated from a model built on the meta device,
  at the placement's dtype; skipped with a device map, where accelerate offloads);
- pickle-format weights (pytorch_model.bin, *.pt, ...: unpickling can run code) or no weights at all;
- a safetensors file whose header is unreadable or whose tensors do not cover the file exactly (truncated,
  padded or garbage); the 8-byte little-endian header length and the JSON header are parsed here;
- tensors whose shapes disagree with the ones config.json implies (none of the config's tensors at all, too);
- a tokenizer with ids past the embedding's rows.
Nothing here reads tensor data: headers only, so a multi-gigabyte folder is checked in milliseconds.
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path
from typing import Any

from attnlab.errors import InputError

SAFE_WEIGHTS = "model.safetensors"
SAFE_INDEX = "model.safetensors.index.json"
PICKLE_PATTERNS = ("pytorch_model*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
MAX_HEADER_BYTES = 100_000_000  # the safetensors format's own limit
DTYPE_BITS = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}
PLACEMENT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

Header = dict[str, tuple[str, tuple[int, ...]]]  # tensor name -> (dtype, shape)


def check_context(max_positions: Any, seq_len: int | None, flag: str, where: str = "") -> None:
    """Refuse `seq_len` tokens past the model's positions `max_positions` (None: no limit in the config)."""
    if seq_len is None or not isinstance(max_positions, int) or max_positions <= 0:
        return
    if seq_len > max_positions:
        raise InputError(
            f"{flag} {seq_len} is longer than the model's context (max_position_embeddings = {max_positions})"
            f"{' in ' + where if where else ''}; use {flag} {max_positions} or less"
        )


def weight_files(path: Path) -> list[Path]:
    """The safetensors files transformers would load from `path` (the index's shards, or model.safetensors)."""
    index = path / SAFE_INDEX
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
            raise InputError(f"{index} is not a readable safetensors index (JSON with a weight_map)") from None
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            raise InputError(f"{index} lists {missing[0]}, which is not in {path}")
        return [path / s for s in shards]
    if (path / SAFE_WEIGHTS).is_file():
        return [path / SAFE_WEIGHTS]
    pickled = sorted(p.name for pat in PICKLE_PATTERNS for p in path.glob(pat))
    if pickled:
        raise InputError(
            f"{path / pickled[0]}: pickle-format weights are not loaded (unpickling can run code); "
            f"convert the folder to safetensors (save_pretrained(..., safe_serialization=True))"
        )
    raise InputError(f"{path} has no {SAFE_WEIGHTS} (nor {SAFE_INDEX}); pass a folder with safetensors weights")


def _header_json(file: Path) -> tuple[dict, int]:
    """(JSON header, bytes of tensor data after it) of a safetensors file, or a one-line error naming `file`."""
    size = file.stat().st_size
    with open(file, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise InputError(f"{file} is not a safetensors file: {size} bytes, shorter than the 8-byte header length")
        n = struct.unpack("<Q", head)[0]
        if n > min(MAX_HEADER_BYTES, size - 8):
            raise InputError(
                f"{file} is not a readable safetensors file: its header length {n} exceeds the file's {size} bytes "
                f"(truncated or not safetensors)"
            )
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise InputError(f"{file} is not a readable safetensors file: its header is not JSON") from None
    if not isinstance(header, dict):
        raise InputError(f"{file} is not a readable safetensors file: its header is not a JSON object")
    return header, size - 8 - n


def _tensor_entry(file: Path, name: str, info: Any) -> tuple[str, tuple[int, ...], int, int]:
    """(dtype, shape, begin, end) of one header entry, checked (its byte range fits its dtype and shape)."""
    bad = InputError(f"{file}: the header entry of tensor {name!r} is malformed")
    if not isinstance(info, dict):
        raise bad
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not (isinstance(shape, list) and isinstance(offsets, list) and len(offsets) == 2):
        raise bad
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in [*shape, *offsets]):
        raise bad
    begin, end = offsets
    bits = DTYPE_BITS.get(str(dtype))
    if end < begin or (bits is not None and end - begin != math.prod(shape) * bits / 8):
        raise InputError(
            f"{file}: tensor {name!r} ({dtype} {list(shape)}) has a byte range {begin}..{end} that does not fit it"
        )
    return str(dtype), tuple(shape), begin, end


def read_header(file: Path) -> Header:
    """{tensor name: (dtype, shape)} of a safetensors file whose tensors cover its data exactly."""
    header, data_bytes = _header_json(file)
    entries = {k: _tensor_entry(file, k, v) for k, v in header.items() if k != "__metadata__"}
    covered = 0
    for _dtype, _shape, begin, end in sorted(entries.values(), key=lambda e: (e[2], e[3])):
        if begin != covered:
            raise InputError(f"{file}: its tensors overlap or leave a gap at byte {covered} (corrupt header)")
        covered = end
    if covered != data_bytes:
        raise InputError(
            f"{file}: the header's tensors need {covered} bytes of data but the file holds {data_bytes} "
            f"({'truncated' if data_bytes < covered else 'extra bytes'}); re-download or re-save the weights"
        )
    return {k: (e[0], e[1]) for k, e in entries.items()}


def meta_model(config: Any, where: Path) -> Any:
    """The config's causal LM built on the meta device (no memory, no weights read)."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            return AutoModelForCausalLM.from_config(config)
    except Exception as exc:  # noqa: BLE001  (a config transformers cannot build a model from)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InputError(
            f"{where}: cannot build a model from this config ({type(exc).__name__}: {first[:160]})"
        ) from None


def available_ram() -> int | None:
    """Bytes of RAM available now (MemAvailable), None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(n_params: int, dtype: str, where: Path, ram: int | None = None) -> None:
    """Refuse weights of `n_params` parameters at `dtype` that exceed the available RAM."""
    need = n_params * PLACEMENT_BYTES.get(dtype, 4)
    ram = available_ram() if ram is None else ram
    if ram is not None and need > ram:
        raise InputError(
            f"{where} implies {n_params / 1e9:,.2f} billion parameters = {_size(need)} of {dtype} weights, more "
            f"than the {_size(ram)} of RAM available here; this model cannot be loaded on this machine"
        )


def _size(n: float) -> str:
    return f"{n / 1e12:,.1f} TB" if n >= 1e12 else f"{n / 1e9:,.1f} GB"


def _strip(name: str, prefix: str) -> str:
    return name[len(prefix) + 1 :] if prefix and name.startswith(prefix + ".") else name


def check_shapes(model: Any, headers: dict[Path, Header], where: Path) -> None:
    """Every tensor the config implies that the files hold must have the config's shape (the base-model prefix,
    e.g. `model.` or `transformer.`, may be missing from the files' names, as transformers allows)."""
    prefix = getattr(model, "base_model_prefix", "") or ""
    expected = {_strip(k, prefix): tuple(v.shape) for k, v in model.state_dict().items()}
    found = {_strip(k, prefix): (f, k, shape) for f, h in headers.items() for k, (_d, shape) in h.items()}
    common = [k for k in expected if k in found]
    if expected and not common:
        files = ", ".join(str(f) for f in headers)
        raise InputError(f"{files} holds none of the tensors {where} implies (such as {next(iter(expected))})")
    bad = [k for k in common if found[k][2] != expected[k]]
    if bad:
        file, name, shape = found[bad[0]]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise InputError(
            f"{file}: tensor {name} has shape {list(shape)} but {where} implies {list(expected[bad[0]])}{more}; "
            f"the weights do not belong to this config"
        )


def check_vocab(tokenizer: Any, model: Any, path: Path) -> None:
    """Refuse a tokenizer whose ids go past the rows of the input embedding."""
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    rows = getattr(getattr(emb, "weight", None), "shape", (None,))[0]
    try:
        ids = max(tokenizer.get_vocab().values(), default=-1) + 1
    except (AttributeError, TypeError, ValueError, NotImplementedError):
        ids = len(tokenizer)
    ids = max(ids, len(tokenizer))
    if isinstance(rows, int) and ids > rows:
        name = path / "tokenizer.json" if (path / "tokenizer.json").is_file() else path
        raise InputError(
            f"{name}: the tokenizer has {ids} token ids but the model's embedding has {rows} rows "
            f"(vocab_size in {path / 'config.json'}); ids {rows}..{ids - 1} would index past it"
        )


def check_folder(
    path: Path,
    config: Any,
    tokenizer: Any,
    *,
    dtype: str = "float32",
    check_ram: bool = True,
    seq_len: int | None = None,
    seq_flag: str = "--tokens",
) -> None:
    """All the checks of the module docstring on the model folder `path` (config and tokenizer already read)."""
    where = path / "config.json"
    check_context(getattr(config, "max_position_embeddings", None), seq_len, seq_flag, str(where))
    model = meta_model(config, where)
    quantized = getattr(config, "quantization_config", None) is not None  # packed weights: other shapes, bytes
    if check_ram and not quantized:
        check_memory(sum(p.numel() for p in model.parameters()), dtype, where)
    headers = {f: read_header(f) for f in weight_files(path)}
    if not quantized:
        check_shapes(model, headers, where)
    check_vocab(tokenizer, model, path)
