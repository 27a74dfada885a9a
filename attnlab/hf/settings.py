"""The config part shared by every real-model command (`scan`, `ablate`, `deploy`): the model, its text windows
and their checks.

`WindowSettings` is the config mixin; `check_window_settings(cfg)` validates the fields every such config has
(model, domains, tokens, samples, seed, text, prefix, align, batch_size, cache_dir) with one-line `InputError`s
naming the field. Their argparse side is `attnlab.hf.cliargs`; loading the model and its windows for a config is
`attnlab.hf.loader.load_checked` and `attnlab.hf.texts.config_windows`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab.errors import check, check_choice, check_count, check_int, names, regular_file

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
    if cfg.text is not None:
        regular_file(cfg.text, "text file")  # a folder, a FIFO or /dev/zero: refused before the model loads
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


def check_head_pairs(pairs: Any, what: str) -> None:
    """Each item must be a (layer, head) pair of integers >= 0 (ranges are checked against the model later)."""
    for p in pairs:
        check(len(p) == 2, f"{what}: expected (layer, head) pairs, got {p!r}")
        check_count(p[0], 0, f"{what} layer", 10_000)
        check_count(p[1], 0, f"{what} head", 10_000)
