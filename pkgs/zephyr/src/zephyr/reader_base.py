"""What every reader shares: the byte range it reads (:class:`FileSlice`), the reader interface,
what to do with bad input (:class:`OnError`), and opening a file's raw bytes.

The readers themselves: :mod:`zephyr.readers` (text, JSON lines) and :mod:`zephyr.parquet_reader`.
"""

from __future__ import annotations

import abc
import enum
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from rigging import filesystem as fs
from zephyr.errors import DataError
from zephyr.worker_context import Counters

__all__ = ["FileSlice", "OnError", "Reader", "RecordFn", "open_raw"]

logger = logging.getLogger(__name__)

RecordFn = Callable[[dict[str, Any]], Any]
"""Turns one JSON object or Parquet row into a record; raises ValueError naming what is wrong."""


class OnError(enum.Enum):
    """What a reader does with a bad line or record."""

    RAISE = "raise"
    SKIP = "skip"

    @classmethod
    def coerce(cls, value: OnError | str) -> OnError:
        """Accept the enum or its string value; anything else names the bad value."""
        if isinstance(value, OnError):
            return value
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"on_error must be one of 'raise', 'skip', got {value!r}") from None


@dataclass(frozen=True)
class FileSlice:
    """A file, or the byte range ``[start, end)`` of it (lines belong to the range they start in).

    Attributes:
        path: the file's URL.
        start: first byte of the range.
        end: end of the range (exclusive); None means the end of the file.
    """

    path: str
    start: int = 0
    end: int | None = None

    def __post_init__(self) -> None:
        if self.start < 0:
            raise ValueError(f"start must be >= 0, got {self.start}")
        if self.end is not None and self.end < self.start:
            raise ValueError(f"end must be >= start ({self.start}), got {self.end}")

    @property
    def whole(self) -> bool:
        """True when the slice is the whole file."""
        return self.start == 0 and self.end is None


def open_raw(path: str) -> IO[bytes]:
    """The raw bytes of ``path`` (compressed or not) as a binary file; a missing file raises DataError."""
    try:
        if fs.is_local(path):
            # The builtin file is markedly faster per line than fsspec's wrapper around it.
            return open(fs.strip_protocol(path), "rb")  # noqa: SIM115 - returned to a with
        return fs.open_file(path, "rb")
    except FileNotFoundError:
        raise DataError(path, "", "file not found") from None


class Reader(abc.ABC):
    """Reads documents (strings) from one file or byte range of a file."""

    on_error: OnError

    @abc.abstractmethod
    def read(self, piece: FileSlice, counters: Counters | None = None) -> Iterator[str]:
        """Yield the documents of ``piece`` in file order."""

    def splittable(self, path: str) -> bool:
        """True when byte ranges of ``path`` can be read independently."""
        return False

    def _bad(self, counters: Counters | None, error: DataError, counter: str = "skipped_records") -> None:
        if self.on_error is OnError.RAISE:
            raise error
        if counters is not None:
            counters.increment(counter)
        logger.warning("skipped: %s", error)

