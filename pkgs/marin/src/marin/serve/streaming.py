"""How much of a streamed completion's text may be sent before the completion ends."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["held_back"]


def held_back(text: str, stops: Sequence[str]) -> int:
    """The length of ``text`` safe to send now: short of a trailing U+FFFD (a character whose bytes
    have not all arrived) and of a tail that may be the start of a stop string (which is cut, never sent)."""
    end = len(text.rstrip("\ufffd"))
    for stop in stops:
        for n in range(min(len(stop) - 1, end), 0, -1):
            if text[end - n:end] == stop[:n]:
                end -= n
                break
    return end
