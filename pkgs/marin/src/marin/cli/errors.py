"""The one exception base for user errors: a message, a hint of what to do next, an exit code."""

from __future__ import annotations

__all__ = ["MarinError"]


class MarinError(Exception):
    """A user error: printed as one line (plus a hint), no traceback unless ``--verbose``."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code
