"""Text domains for real-model scans (spec extreme-tokens §10.3): token windows of fixed length.

| domain | source |
|---|---|
| prose  | English prose: the pydoc topics text (`pydoc_data.topics.topics`, sorted by key, joined) |
| code   | Python source: the standard library's `.py` files (via `sysconfig`, sorted; excluding `test/`, `tests/`,
  `idlelib/`, `site-packages`), tokenised per file |
| random | token ids drawn uniformly from the non-special vocabulary |
| text   | a user text file (`text_file=`), UTF-8 |

Windows of `seq_len` tokens start at seeded offsets into the tokenised source (`align="random"`, the default), or
at the start of a document (`align="doc"`: a pydoc topic for prose, a file for code, the whole text for a text
file), so that position 0 holds a document's first token. No prefix token is added; the caller may prepend one.
For `code` each window comes from one file long enough to hold it.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnlab.errors import InputError, regular_file

DOMAINS = ("prose", "code", "random")
CODE_EXCLUDE = ("test", "tests", "idlelib", "site-packages", "__pycache__", "lib2to3")
MAX_CODE_FILES = 400  # tokenising every stdlib file takes minutes; a seeded subset of files is enough


def prose_text() -> str:
    """The pydoc topics text: every topic's help text, sorted by topic name, joined by blank lines."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


def stdlib_py_files() -> tuple[Path, ...]:
    """Sorted standard-library `.py` files, excluding tests, idlelib and site-packages."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in CODE_EXCLUDE and not d.startswith(".")]
        files += [Path(dirpath) / f for f in filenames if f.endswith(".py")]
    files.sort()
    if not files:
        raise InputError(f"no Python source files found under {root} for the code domain")
    return tuple(files)


def read_text_file(path: str | Path) -> str:
    """Read a user text file as UTF-8, with one-line errors for missing, unreadable or empty files."""
    path = regular_file(path, "text file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"text file {path} is not UTF-8") from None
    except OSError as exc:
        raise InputError(f"cannot read text file {path}: {exc.strerror}") from None
    if not text.strip():
        raise InputError(f"text file {path} is empty")
    return text


def _encode(tokenizer, text: str) -> np.ndarray:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return np.asarray(ids, dtype=np.int64)


def _windows_from_text(tokenizer, text: str, n: int, seq_len: int, rng: np.random.Generator, what: str) -> np.ndarray:
    """n windows of seq_len tokens from a long text, without tokenising all of it.

    Each window starts at a seeded character offset; the slice from there is tokenised (doubling its length until
    it holds seq_len + 1 tokens) and its first token, possibly a fragment of a word, is dropped. Texts shorter
    than 16·seq_len characters are tokenised whole and cut at seeded token offsets.
    """
    span = 8 * seq_len + 64
    if len(text) < 2 * span:
        return _windows_from_stream(_encode(tokenizer, text), n, seq_len, rng, what)
    out = []
    for start in np.sort(rng.integers(0, len(text) - span, size=n)):
        width = span
        while True:
            ids = _encode(tokenizer, text[start : start + width])
            if len(ids) >= seq_len + 1 or start + width >= len(text):
                break
            width *= 2
        if len(ids) < seq_len + 1:  # near the end: take the last seq_len tokens instead
            ids = _encode(tokenizer, text[max(0, len(text) - 16 * span) :])
            ids = np.concatenate([ids[:1], ids[-seq_len:]])
        out.append(ids[1 : seq_len + 1])
    return np.stack(out)


def _windows_from_stream(ids: np.ndarray, n: int, seq_len: int, rng: np.random.Generator, what: str) -> np.ndarray:
    """n windows of seq_len tokens at seeded offsets into one token stream."""
    if len(ids) < seq_len:
        raise InputError(
            f"{what} has {len(ids)} tokens, fewer than --tokens {seq_len}; use a longer text or a smaller --tokens"
        )
    n_start = len(ids) - seq_len + 1
    replace = n > n_start
    starts = np.sort(rng.choice(n_start, size=n, replace=replace))
    return np.stack([ids[s : s + seq_len] for s in starts])


def _prose_doc_windows(tokenizer, n: int, seq_len: int, rng: np.random.Generator) -> np.ndarray:
    """n windows, each the first seq_len tokens of a pydoc topic with ≥ seq_len tokens (seeded choice)."""
    from pydoc_data.topics import topics

    keys = sorted(topics)
    out = []
    for k in rng.permutation(len(keys)):
        ids = _encode(tokenizer, topics[keys[k]].lstrip())
        if len(ids) >= seq_len:
            out.append(ids[:seq_len])
        if len(out) == n:
            return np.stack(out)
    raise InputError(
        f"prose domain: only {len(out)} pydoc topics have ≥ {seq_len} tokens, need {n}; lower --samples or --tokens"
    )


def _code_windows(tokenizer, n: int, seq_len: int, rng: np.random.Generator, align: str = "random") -> np.ndarray:
    """n windows, each from one stdlib file with ≥ seq_len tokens (files visited in seeded order)."""
    files = list(stdlib_py_files())
    order = rng.permutation(len(files))
    out: list[np.ndarray] = []
    tried = 0
    for k in order:
        if len(out) >= n or tried >= MAX_CODE_FILES:
            break
        tried += 1
        try:
            text = files[k].read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if align == "doc":
            ids = _encode(tokenizer, text[: 16 * seq_len + 256])
            if len(ids) >= seq_len:
                out.append(ids[:seq_len])
            continue
        if len(text) > 4 * (16 * seq_len + 256):  # long file: tokenise a seeded slice (first token dropped)
            try:
                out.append(_windows_from_text(tokenizer, text, 1, seq_len, rng, str(files[k]))[0])
            except InputError:
                pass
            continue
        ids = _encode(tokenizer, text)
        if len(ids) < seq_len:
            continue
        s = int(rng.integers(0, len(ids) - seq_len + 1))
        out.append(ids[s : s + seq_len])
    if len(out) < n:
        raise InputError(
            f"code domain: only {len(out)} of {tried} standard-library files have ≥ {seq_len} "
            f"tokens, need {n}; lower --samples or --tokens"
        )
    return np.stack(out)


def special_token_ids(tokenizer) -> set[int]:
    """Ids the tokenizer treats as special (BOS/EOS/PAD/UNK and added special tokens)."""
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    return {int(i) for i in ids if i is not None}


def _random_windows(tokenizer, n: int, seq_len: int, rng: np.random.Generator) -> np.ndarray:
    vocab = len(tokenizer)
    allowed = np.setdiff1d(np.arange(vocab), np.fromiter(special_token_ids(tokenizer), dtype=np.int64))
    return rng.choice(allowed, size=(n, seq_len), replace=True).astype(np.int64)


def domain_windows(
    tokenizer, domain: str, n: int, seq_len: int, seed: int, text_file=None, align: str = "random"
) -> torch.Tensor:
    """[n, seq_len] token ids for `domain` ("prose", "code", "random", or "text" with `text_file`).

    `align`: "random" (seeded offsets) or "doc" (windows start at a document start; see the module docstring).
    A `text_file` given with any domain name other than the three built-ins is used as that domain's source.
    """
    if n < 1:
        raise InputError(f"--samples must be ≥ 1, got {n}")
    if seq_len < 2:
        raise InputError(f"--tokens must be ≥ 2, got {seq_len}")
    if align not in ("random", "doc"):
        raise InputError(f"--align must be random or doc; got {align!r}")
    digest = int(hashlib.sha256(domain.encode()).hexdigest()[:8], 16)
    rng = np.random.default_rng([seed, digest])
    if text_file is not None and domain not in DOMAINS:
        text = read_text_file(text_file)
        if align == "doc":
            arr = _windows_from_stream(_encode(tokenizer, text)[:seq_len], n, seq_len, rng, f"text file {text_file}")
        else:
            arr = _windows_from_text(tokenizer, text, n, seq_len, rng, f"text file {text_file}")
    elif domain == "prose" and align == "doc":
        arr = _prose_doc_windows(tokenizer, n, seq_len, rng)
    elif domain == "prose":
        arr = _windows_from_text(tokenizer, prose_text(), n, seq_len, rng, "the prose domain")
    elif domain == "code":
        arr = _code_windows(tokenizer, n, seq_len, rng, align)
    elif domain == "random":
        arr = _random_windows(tokenizer, n, seq_len, rng)
    else:
        raise InputError(f"unknown domain {domain!r}; use one of {', '.join(DOMAINS)} or --text FILE")
    return torch.as_tensor(arr, dtype=torch.long)


def source_manifest() -> dict:
    """What the domains read: the pydoc text hash and the stdlib root and file count (for manifest.json)."""
    text = prose_text()
    files = stdlib_py_files()
    return {
        "prose_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "prose_chars": len(text),
        "stdlib_root": str(Path(sysconfig.get_paths()["stdlib"])),
        "stdlib_py_files": len(files),
    }


def prefix_id(prefix: str, tokenizer: Any) -> int | None:
    """Token id put before every window: "none" (None), "bos", "eos" or an integer id."""
    if prefix == "none":
        return None
    if prefix in ("bos", "eos"):
        tid = getattr(tokenizer, f"{prefix}_token_id", None)
        if tid is None:
            raise InputError(f"--prefix {prefix}: this tokenizer has no {prefix.upper()} token")
        return int(tid)
    try:
        tid = int(prefix)
    except ValueError:
        raise InputError(f"--prefix must be none, bos, eos or a token id; got {prefix!r}") from None
    if not 0 <= tid < len(tokenizer):
        raise InputError(f"--prefix {tid} out of range 0..{len(tokenizer) - 1}")
    return tid


def prefixed_windows(
    tokenizer: Any,
    domain: str,
    samples: int,
    tokens: int,
    seed: int,
    text_file: str | None = None,
    prefix: str = "none",
    align: str = "random",
) -> torch.Tensor:
    """[samples, tokens] ids of one domain: `domain_windows` of tokens − 1 ids after the prefix token, if any."""
    pid = prefix_id(prefix, tokenizer)
    body = tokens - (1 if pid is not None else 0)
    ids = domain_windows(tokenizer, domain, samples, body, seed, text_file=text_file, align=align)
    if pid is not None:
        ids = torch.cat([torch.full((ids.shape[0], 1), pid, dtype=torch.long), ids], dim=1)
    return ids


def config_windows(tokenizer: Any, cfg: Any, domain: str) -> Any:
    """[samples, tokens] ids of `domain` for a real-model config (prefix token, if any, at position 0)."""
    return prefixed_windows(
        tokenizer, domain, cfg.samples, cfg.tokens, cfg.seed, text_file=cfg.text, prefix=cfg.prefix, align=cfg.align
    )
