"""Text domains for real-model scans (spec extreme-tokens §10.3): token windows of fixed length.

| domain | source |
|---|---|
| prose  | English prose: the pydoc topics text (`pydoc_data.topics.topics`, sorted by key, joined) |
| code   | Python source: the standard library's `.py` files (via `sysconfig`, sorted; excluding `test/`, `tests/`, `idlelib/`, `site-packages`), tokenised per file |
| random | token ids drawn uniformly from the non-special vocabulary |
| text   | a user text file (`text_file=`), UTF-8 |

Windows of `seq_len` tokens start at seeded offsets into the tokenised source (no prefix token is added; the
caller may prepend one). For `code` each window comes from one file long enough to hold it.
"""

from __future__ import annotations

import hashlib
import sysconfig
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from attnlab.errors import AttnlabError

DOMAINS = ("prose", "code", "random")
CODE_EXCLUDE = ("test", "tests", "idlelib", "site-packages", "__pycache__", "lib2to3")
MAX_CODE_FILES = 400  # tokenising every stdlib file takes minutes; a seeded subset of files is enough


def prose_text() -> str:
    """The pydoc topics text: every topic's help text, sorted by topic name, joined by blank lines."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


@lru_cache(maxsize=1)
def stdlib_py_files() -> tuple[Path, ...]:
    """Sorted standard-library `.py` files, excluding tests, idlelib and site-packages."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).parts
        if any(part in CODE_EXCLUDE for part in rel[:-1]):
            continue
        files.append(p)
    if not files:
        raise AttnlabError(f"no Python source files found under {root} for the code domain")
    return tuple(files)


def read_text_file(path: str | Path) -> str:
    """Read a user text file as UTF-8, with one-line errors for missing, unreadable or empty files."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise AttnlabError(f"text file {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise AttnlabError(f"text file {path} is not UTF-8") from None
    except OSError as exc:
        raise AttnlabError(f"cannot read text file {path}: {exc.strerror}") from None
    if not text.strip():
        raise AttnlabError(f"text file {path} is empty")
    return text


def _encode(tokenizer, text: str) -> np.ndarray:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return np.asarray(ids, dtype=np.int64)


def _windows_from_stream(ids: np.ndarray, n: int, seq_len: int, rng: np.random.Generator, what: str) -> np.ndarray:
    """n windows of seq_len tokens at seeded offsets into one token stream."""
    if len(ids) < seq_len:
        raise AttnlabError(f"{what} has {len(ids)} tokens, fewer than --tokens {seq_len}; use a longer text or "
                           f"a smaller --tokens")
    n_start = len(ids) - seq_len + 1
    replace = n > n_start
    starts = np.sort(rng.choice(n_start, size=n, replace=replace))
    return np.stack([ids[s:s + seq_len] for s in starts])


def _code_windows(tokenizer, n: int, seq_len: int, rng: np.random.Generator) -> np.ndarray:
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
        ids = _encode(tokenizer, text)
        if len(ids) < seq_len:
            continue
        s = int(rng.integers(0, len(ids) - seq_len + 1))
        out.append(ids[s:s + seq_len])
    if len(out) < n:
        raise AttnlabError(f"code domain: only {len(out)} of {tried} standard-library files have ≥ {seq_len} "
                           f"tokens, need {n}; lower --samples or --tokens")
    return np.stack(out)


def special_token_ids(tokenizer) -> set[int]:
    """Ids the tokenizer treats as special (BOS/EOS/PAD/UNK and added special tokens)."""
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    return {int(i) for i in ids if i is not None}


def _random_windows(tokenizer, n: int, seq_len: int, rng: np.random.Generator) -> np.ndarray:
    vocab = len(tokenizer)
    allowed = np.setdiff1d(np.arange(vocab), np.fromiter(special_token_ids(tokenizer), dtype=np.int64))
    return rng.choice(allowed, size=(n, seq_len), replace=True).astype(np.int64)


def domain_windows(tokenizer, domain: str, n: int, seq_len: int, seed: int, text_file=None) -> torch.LongTensor:
    """[n, seq_len] token ids for `domain` ("prose", "code", "random", or "text" with `text_file`).

    A `text_file` given with any domain name other than the three built-ins is used as that domain's source.
    """
    if n < 1:
        raise AttnlabError(f"--samples must be ≥ 1, got {n}")
    if seq_len < 2:
        raise AttnlabError(f"--tokens must be ≥ 2, got {seq_len}")
    digest = int(hashlib.sha256(domain.encode()).hexdigest()[:8], 16)
    rng = np.random.default_rng([seed, digest])
    if text_file is not None and domain not in DOMAINS:
        arr = _windows_from_stream(_encode(tokenizer, read_text_file(text_file)), n, seq_len, rng,
                                   f"text file {text_file}")
    elif domain == "prose":
        arr = _windows_from_stream(_encode(tokenizer, prose_text()), n, seq_len, rng, "the prose domain")
    elif domain == "code":
        arr = _code_windows(tokenizer, n, seq_len, rng)
    elif domain == "random":
        arr = _random_windows(tokenizer, n, seq_len, rng)
    else:
        raise AttnlabError(f"unknown domain {domain!r}; use one of {', '.join(DOMAINS)} or --text FILE")
    return torch.as_tensor(arr, dtype=torch.long)


def source_manifest() -> dict:
    """What the domains read: the pydoc text hash and the stdlib root and file count (for manifest.json)."""
    text = prose_text()
    files = stdlib_py_files()
    return {"prose_sha256": hashlib.sha256(text.encode()).hexdigest(), "prose_chars": len(text),
            "stdlib_root": str(Path(sysconfig.get_paths()["stdlib"])), "stdlib_py_files": len(files)}
