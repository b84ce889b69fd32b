"""Formats of raw text datasets, as Marin's files name them (``TextLmDatasetFormat``).

Only plain text is supported: documents are a string field of each record (JSON lines, Parquet)
or the lines of a text file.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LmDatasetFormatBase", "TextLmDatasetFormat"]


class LmDatasetFormatBase:
    """Base of dataset formats (Marin's name); :class:`TextLmDatasetFormat` is the one implemented."""


@dataclass(frozen=True)
class TextLmDatasetFormat(LmDatasetFormatBase):
    """Raw text: each record's ``text_key`` field is one document."""

    text_key: str = "text"
    """Field (JSON lines) or column (Parquet) holding the text."""

    def __post_init__(self) -> None:
        if not isinstance(self.text_key, str) or not self.text_key:
            raise ValueError(f"text_key must be a non-empty field name, got {self.text_key!r}")
