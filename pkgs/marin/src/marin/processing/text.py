"""Text normalisation shared by every data-curation step: one definition of a word, a paragraph
and a normalised text, so dedup, decontamination and the heuristics agree.

* :func:`normalize` (exact-duplicate keys): Unicode NFC, lowercased, every run of whitespace
  collapsed to one space, stripped. Punctuation is kept: two texts that differ only in their
  punctuation are not exact duplicates.
* :func:`words` (shingles and n-grams): lowercased, every Unicode punctuation character (category
  ``P*``) replaced by a space, split on whitespace. So text re-wrapped to other line lengths, or
  re-punctuated, has the same words.
* :func:`paragraph_spans`: a paragraph is one line (text between ``\\n`` characters) that is not
  blank, without its leading and trailing whitespace; spans are ``[start, end)`` character offsets
  into the original text.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Iterator

import xxhash

__all__ = ["content_hash", "ngram_hashes", "normalize", "paragraph_spans", "words"]


def normalize(text: str) -> str:
    """The exact-duplicate form of ``text``: NFC, lowercase, whitespace collapsed, stripped."""
    return " ".join(unicodedata.normalize("NFC", text).lower().split())


class _PunctuationToSpace(dict):
    """A ``str.translate`` table filled as characters are met: Unicode punctuation (category ``P*``)
    maps to a space, anything else to itself (building it for all of Unicode up front takes seconds)."""

    def __missing__(self, code: int) -> str:
        value = " " if unicodedata.category(chr(code)).startswith("P") else chr(code)
        self[code] = value
        return value


@functools.cache
def _punctuation_to_space() -> _PunctuationToSpace:
    return _PunctuationToSpace()


def words(text: str) -> list[str]:
    """The words of ``text``: lowercased, punctuation replaced by spaces, split on whitespace."""
    return text.lower().translate(_punctuation_to_space()).split()


def content_hash(text: str) -> str:
    """Hex xxh3-128 digest of :func:`normalize`'d text: the key of an exact duplicate."""
    return xxhash.xxh3_128_hexdigest(normalize(text).encode("utf-8"))


def ngram_hashes(tokens: list[str], n: int) -> list[int]:
    """xxh3-64 of each run of ``n`` consecutive words (joined by one space), in order.

    A text shorter than ``n`` words gives one hash, of all its words; no words give none.
    """
    if n <= 0:
        raise ValueError(f"n must be > 0, got {n}")
    if not tokens:
        return []
    digest = xxhash.xxh3_64_intdigest
    if len(tokens) < n:
        return [digest(" ".join(tokens).encode("utf-8"))]
    return [digest(" ".join(tokens[i:i + n]).encode("utf-8")) for i in range(len(tokens) - n + 1)]


def paragraph_spans(text: str) -> Iterator[tuple[int, int]]:
    """``[start, end)`` of each non-blank line of ``text``, without surrounding whitespace."""
    start = 0
    length = len(text)
    while start <= length:
        end = text.find("\n", start)
        if end < 0:
            end = length
        lo, hi = start, end
        while lo < hi and text[lo].isspace():
            lo += 1
        while hi > lo and text[hi - 1].isspace():
            hi -= 1
        if hi > lo:
            yield lo, hi
        start = end + 1
