"""Masking the values of the ``Secret``s a step's config holds, wherever its output is shown."""

from __future__ import annotations

from typing import Any

from marin.execution.core.walk import Kind, items_of, kind_of
from rigging.secrets import Secret, SecretNotFound

__all__ = ["MASK", "SecretMask"]

MASK = "***"

_MIN_LENGTH = 4
"""Shorter values are not masked: replacing every "a" in a log would hide the log, not the secret."""


class SecretMask:
    """Replaces each known secret value in a text by :data:`MASK` (as CI systems mask registered
    secrets): a step that prints its token leaves ``***`` in its log."""

    def __init__(self, values: tuple[str, ...] = ()):
        # Longest first, so a secret containing another is masked whole.
        self._values = tuple(sorted({v for v in values if len(v) >= _MIN_LENGTH}, key=len, reverse=True))

    @classmethod
    def of(cls, config: Any) -> SecretMask:
        """The values, as this process resolves them, of every ``Secret`` in ``config`` (unset ones are skipped)."""
        values = []
        stack = [config]
        while stack:
            value = stack.pop()
            kind = kind_of(value)
            if isinstance(value, Secret):
                try:
                    values.append(value.get())
                except SecretNotFound:
                    pass  # the step will fail asking for it; there is nothing to mask
            elif kind not in (Kind.LEAF, Kind.PLACEHOLDER):
                stack.extend(child for _, child in items_of(value, kind))
        return cls(tuple(values))

    def __bool__(self) -> bool:
        return bool(self._values)

    def __call__(self, text: str) -> str:
        for value in self._values:
            text = text.replace(value, MASK)
        return text

    def rewrite(self, path: str) -> None:
        """Mask a local text file in place (a log the worker wrote itself)."""
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        masked = self(text)
        if masked != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(masked)
