"""Durations as people write them (``"2h"``, ``"1h30m"``, ``"7d"``, ``"45s"`` or seconds), as they read
them, and ages as people say them (``"3 days"``)."""

from __future__ import annotations

import math
import re

__all__ = ["format_age", "format_duration", "parse_duration"]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(d|h|m|s)")
_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(text: str | float) -> float:
    """Seconds in ``"2h"``, ``"1h30m"``, ``"90m"``, ``"45s"``, ``"1.5h"``, ``"7d"`` or a plain number of seconds.

    Raises:
        ValueError: naming the text when it is none of those or not positive.
    """
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ValueError(f"duration must look like 2h, 1h30m, 90m, 45s, 7d or seconds, got {text!r}")
    cleaned = str(text).strip().lower().replace(" ", "")
    try:
        seconds = float(cleaned)
    except ValueError:
        parts = _DURATION.findall(cleaned)
        if not parts or "".join(n + u for n, u in parts) != cleaned:
            raise ValueError(f"duration must look like 2h, 1h30m, 90m, 45s, 7d or seconds, got {text!r}") from None
        seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if not seconds > 0 or not math.isfinite(seconds):
        raise ValueError(f"duration must be > 0, got {text!r}")
    return seconds


_AGE_UNITS = (("day", 86400.0), ("hour", 3600.0), ("minute", 60.0))


def format_age(seconds: float) -> str:
    """How old something is, in its largest whole unit: ``"3 days"``, ``"1 hour"``, ``"40 seconds"``
    (a negative age, a clock set back, is ``"0 seconds"``)."""
    for unit, size in _AGE_UNITS:
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    count = max(int(seconds), 0)
    return f"{count} second{'s' if count != 1 else ''}"


def format_duration(seconds: float | None) -> str:
    """``"3h 10m"``, ``"4m 05s"``, ``"12.3s"``; ``"no estimate"`` for None."""
    if seconds is None:
        return "no estimate"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"
