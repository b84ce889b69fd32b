"""The FineWeb quality rules' metrics (Penedo et al. 2024, "The FineWeb Datasets", section 3.3),
measured as datatrove's ``FineWebQualityFilter`` measures them, with nothing downloaded.

A document's lines are its ``\\n``-separated pieces that are not blank, as they are (not stripped):

* ``line_punctuation``: share of lines whose last character is a sentence terminal (Unicode's
  ``Sentence_Terminal`` property: ``. ! ?``, ``。``, ``।``, ``؟`` ...); FineWeb drops a document below 0.12;
* ``short_lines``: share of lines of at most 30 characters; dropped above 0.67;
* ``duplicate_line_chars``: characters of the lines equal to an earlier line, over the characters
  of the text without its newlines; dropped above 0.01;
* ``newlines_per_word``: ``\\n`` characters per word (a list-like page); dropped above 0.3.

Words are counted by :func:`fineweb_words`, a regular expression where datatrove uses NLTK's
English word tokenizer (whose data it downloads at first use): runs of letters and digits (with
inner hyphens, periods and commas), a contraction's ``'s`` or ``'t``, and each other non-space
character, as NLTK counts punctuation (within 1% of NLTK's count on English prose).
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["fineweb_metrics", "fineweb_words"]


@functools.cache
def _patterns() -> tuple[Any, Any]:
    """(a word, a sentence terminal): compiled on first use, since importing the handles (which
    import this module) must stay light and ``regex`` is only needed when a document is measured."""
    import regex  # Unicode properties that ``re`` lacks (Sentence_Terminal, \p{L})

    # Letters and digits joined by inner hyphens, periods or commas ("well-known", "3.50") are one
    # word; an apostrophe starts a word ("it", "'s"), "..." and "--" are one, as NLTK splits them.
    word = regex.compile(r"[\p{L}\p{N}\p{M}]+(?:[.,-][\p{L}\p{N}\p{M}]+)*|['\u2019][\p{L}\p{M}]+|\.\.\.|--+"
                         r"|[^\s\p{L}\p{N}\p{M}]")
    return word, regex.compile(r"\p{Sentence_Terminal}")


def fineweb_words(text: str) -> list[str]:
    """The words of ``text`` as the FineWeb list rule counts them (see the module docstring)."""
    return _patterns()[0].findall(text)


def fineweb_metrics(text: str, short_line_chars: int = 30) -> dict[str, float]:
    """The four FineWeb metrics of ``text`` (see the module docstring); a text with no line has
    ``line_punctuation`` 0 (it fails that rule, as datatrove drops an empty document)."""
    lines = [line for line in text.split("\n") if line.strip()]
    count = max(len(lines), 1)
    terminal = _patterns()[1]
    seen: set[str] = set()
    duplicate_chars = 0
    for line in lines:
        if line in seen:
            duplicate_chars += len(line)
        seen.add(line)
    return {
        "line_punctuation": sum(1 for line in lines if terminal.match(line[-1])) / count,
        "short_lines": sum(1 for line in lines if len(line) <= short_line_chars) / count,
        "duplicate_line_chars": duplicate_chars / max(len(text) - text.count("\n"), 1),
        "newlines_per_word": text.count("\n") / max(len(fineweb_words(text)), 1),
    }
