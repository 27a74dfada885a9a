"""Character corpora and vocabularies (spec extreme-tokens §2.1)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnlab.errors import InputError, regular_file

MIN_CORPUS_CHARS = 10_000
DEFAULT_CORPUS = "pydoc_data"


def default_corpus_text() -> str:
    """CPython's `pydoc_data.topics`: topic strings in sorted key order joined by blank lines."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


def load_corpus(path: str | Path | None = None) -> tuple[str, str]:
    """Return (text, source name). `path=None` gives the default corpus; otherwise a UTF-8 file."""
    if path is None or str(path) == DEFAULT_CORPUS:
        return default_corpus_text(), DEFAULT_CORPUS
    p = regular_file(path, "corpus file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"corpus file {p} is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise InputError(f"corpus file {p} is unreadable: {exc.strerror}") from None
    return text, str(p)


@dataclass(frozen=True)
class Vocabulary:
    """Kept characters (ids 0..n-1 in code-point order) plus `<s>` = n and `<d>` = n+1."""

    chars: tuple[str, ...]

    @property
    def n_chars(self) -> int:
        return len(self.chars)

    @property
    def bos(self) -> int:
        return self.n_chars

    @property
    def delim(self) -> int:
        return self.n_chars + 1

    @property
    def size(self) -> int:
        return self.n_chars + 2

    def token_names(self) -> list[str]:
        return [repr(c)[1:-1] if c not in (" ",) else "␣" for c in self.chars] + ["<s>", "<d>"]

    def encode_text(self, text: str) -> np.ndarray:
        """Map each character to its id, or -1 when it is not kept (a segment break). Shape [len(text)]."""
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        kept = np.array([ord(c) for c in self.chars], dtype=np.uint32)  # sorted by code point
        pos = np.searchsorted(kept, codes)
        pos_c = np.minimum(pos, len(kept) - 1)
        return np.where(kept[pos_c] == codes, pos_c, -1).astype(np.int64)

    def decode(self, ids) -> str:
        names = list(self.chars) + ["<s>", "<d>"]
        return "".join(names[int(i)] for i in ids)


def build_vocabulary(text: str, vocab_chars: int = 64, source: str = "corpus") -> Vocabulary:
    """Keep the `vocab_chars` most frequent characters (ties by code point; 0 keeps all), ids in code-point order."""
    if len(text) < MIN_CORPUS_CHARS:
        raise InputError(f"corpus {source} has {len(text)} characters; need at least {MIN_CORPUS_CHARS}")
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    uniq, counts = np.unique(codes, return_counts=True)
    if vocab_chars < 0:
        raise InputError(f"vocab_chars={vocab_chars}; use 0 (all characters) or a positive count")
    if vocab_chars and len(uniq) < vocab_chars:
        raise InputError(
            f"corpus {source} has {len(uniq)} distinct characters but the vocabulary asks for "
            f"{vocab_chars}; pass --vocab-chars {len(uniq)} (or 0 for all) or a larger corpus"
        )
    order = np.lexsort((uniq, -counts))  # by count descending, then code point
    keep = uniq[order[:vocab_chars]] if vocab_chars else uniq
    return Vocabulary(tuple(chr(c) for c in sorted(int(k) for k in keep)))


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
