"""Unigram and bigram statistics of a character corpus (spec extreme-tokens §2.2)."""

from __future__ import annotations

import numpy as np

from attnlab.toy.corpus import Vocabulary


def count_statistics(ids: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Unigram counts [n] of kept ids and bigram counts [n,n] of adjacent kept pairs.

    `ids`: [len] ints in 0..n-1, or -1 for dropped characters (segment breaks: a pair touching one is not counted).
    """
    uni = np.bincount(ids[ids >= 0], minlength=n).astype(np.float64)
    a, b = ids[:-1], ids[1:]
    ok = (a >= 0) & (b >= 0)
    bi = np.bincount(a[ok] * n + b[ok], minlength=n * n).reshape(n, n).astype(np.float64)
    return uni, bi


def bigram_law(bi: np.ndarray, uni: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Row-normalised bigram counts P(b|a) (no smoothing); empty rows fall back to the unigram law.

    Returns (P [n,n], ids of the rows that fell back).
    """
    rows = bi.sum(1, keepdims=True)
    empty = np.flatnonzero(rows[:, 0] == 0).tolist()
    P = np.divide(bi, rows, out=np.zeros_like(bi), where=rows > 0)
    if empty:
        P[empty] = uni / uni.sum()
    return P, empty


def triggers_by_frequency(uni: np.ndarray, k: int) -> list[int]:
    """The k ids with the largest unigram frequency (ties broken by the smaller id)."""
    order = np.lexsort((np.arange(len(uni)), -uni))
    return sorted(int(i) for i in order[:k])


def vocab_statistics(text: str, vocab: Vocabulary) -> dict:
    """Everything §2.2 needs from a corpus: counts, u, P and the fallback rows."""
    ids = vocab.encode_text(text)
    uni, bi = count_statistics(ids, vocab.n_chars)
    P, empty = bigram_law(bi, uni)
    return {
        "unigram": uni / uni.sum(),
        "bigram": P,
        "empty_rows": empty,
        "dropped_fraction": float((ids < 0).mean()),
        "bigram_counts": bi,
    }
