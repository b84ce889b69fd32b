"""Suggestions for a misspelled name: the one place "did you mean" is decided."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["closest_name", "did_you_mean"]


def closest_name(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``name`` most likely misspells (a close spelling, or the same letters in another
    case), or None when none is close enough to suggest."""
    names = sorted({c for c in candidates if c and c != name})
    folded = {c.lower(): c for c in names}
    if name.lower() in folded:
        return folded[name.lower()]
    found = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    return found[0] if found else None


def did_you_mean(name: str, candidates: Iterable[str], *, quote: str = "'", after: str = "") -> str:
    """``"; did you mean 'tokenized'?"`` for ``closest_name``, else ``""``: a suffix for a message.

    Args:
        quote: what goes around the suggestion.
        after: appended to the suggestion inside the quotes (``"="`` for a keyword argument).
    """
    found = closest_name(name, candidates)
    return f"; did you mean {quote}{found}{after}{quote}?" if found is not None else ""
