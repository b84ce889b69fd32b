"""Values and tables as people read them: decimal numbers, local times, sizes, tables that fit the
terminal (``marin show``, ``marin compare``)."""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Sequence

__all__ = ["fitted_table", "format_bytes", "format_count", "format_local_span", "format_local_time", "format_value",
           "plural", "terminal_width"]

_UNITS = ("bytes", "kB", "MB", "GB", "TB", "PB")


def format_bytes(size: int | float | None) -> str:
    """``"3.3 MB"`` (decimal units, as ``du --si`` and file managers write them); ``-`` for None."""
    if size is None:
        return "-"
    value = float(size)
    for unit in _UNITS:
        if abs(value) < 1000 or unit == _UNITS[-1]:
            return f"{int(value)} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def format_count(n: int | float) -> str:
    """``1,511``: a count with thousands separators (a float that is whole counts too)."""
    return f"{int(n):,}" if float(n).is_integer() else format_value(n)


def format_local_time(timestamp: float | None) -> str:
    """``"2026-12-01 14:07:38 CET"``: a Unix time in this machine's time zone; ``-`` for None."""
    if timestamp is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(timestamp))


def format_local_span(start: float | None, end: float | None) -> str:
    """``"2026-12-01 14:07:38 to 14:15:02 CET"``: two local times, the second's date left out when
    it is the first's."""
    if start is None or end is None:
        return f"{format_local_time(start)} to {format_local_time(end)}"
    first, second = time.localtime(start), time.localtime(end)
    if first[:3] != second[:3]:
        return f"{format_local_time(start)} to {format_local_time(end)}"
    return f"{time.strftime('%Y-%m-%d %H:%M:%S', first)} to {time.strftime('%H:%M:%S %Z', second)}"


def plural(n: int, noun: str) -> str:
    """``"1 file"``, ``"34 files"``, ``"1,511 tokens"``."""
    return f"{format_count(n)} {noun}{'' if n == 1 else 's'}"


def format_value(value: object) -> str:
    """A config or result value in a line: floats in decimal (``0.003``, ``1e-05``, never hex), text
    as it is, lists and mappings in brief."""
    if isinstance(value, bool) or value is None:
        return str(value).lower() if value is not None else "none"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return repr(value) if value == 0 or 1e-4 <= abs(value) < 1e15 else f"{value:.6g}"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return value
    if isinstance(value, Sequence):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def terminal_width(default: int = 100) -> int:
    """Columns of the terminal (``COLUMNS`` when set), ``default`` when there is none."""
    return shutil.get_terminal_size((default, 24)).columns


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 1, 0)] + "…"


def fitted_table(header: Sequence[str], rows: Sequence[Sequence[str]], width: int, *, keep: int = 1) -> str:
    """A table no line of which is wider than ``width``: its columns in blocks, one under the other,
    each block repeating the first ``keep`` columns (the row's name), as pandas wraps a wide frame.
    A column too wide for a block of its own has its cells cut with ``…``.
    """
    gap = 2
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    key_width = sum(widths[:keep]) + gap * keep
    if key_width > width // 2:  # long row names: cut them so that a block keeps room for values
        share = max((width // 2) // max(keep, 1) - gap, 8)
        widths[:keep] = [min(w, share) for w in widths[:keep]]
        key_width = sum(widths[:keep]) + gap * keep
    room = max(width - key_width, 8)
    blocks: list[list[int]] = []
    used = room + 1
    for i in range(keep, len(header)):
        widths[i] = min(widths[i], room)
        if used + widths[i] > room:
            blocks.append([])
            used = 0
        blocks[-1].append(i)
        used += widths[i] + gap
    out = []
    for block in blocks or [[]]:
        columns = [*range(keep), *block]
        lines = [[_cut(str(r[i]), widths[i]).ljust(widths[i]) for i in columns] for r in [header, *rows]]
        out.append("\n".join((" " * gap).join(cells).rstrip() for cells in lines))
    return "\n\n".join(out)
