"""Logging setup shared by the command line and workers."""

from __future__ import annotations

import logging
import sys

__all__ = ["LOG_LEVELS", "printable", "setup_logging"]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def printable(text: str) -> str:
    """``text`` with each lone surrogate written as its escape (``\\ud800``), so any UTF-8 log, terminal
    or file can write it. Text decoded from damaged input (a JSON escape, ``surrogateescape``) may hold them."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def setup_logging(level: str = "INFO", stream=None) -> None:
    """Send log records of ``level`` and above to ``stream`` (stderr) with one plain format."""
    level = level.upper()
    if level not in LOG_LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_rigging", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler._rigging = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    root.addHandler(handler)
    root.setLevel(level)
