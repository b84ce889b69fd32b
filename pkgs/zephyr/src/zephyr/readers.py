"""Readers that turn files into documents (strings).

(Written token shards are read back by :class:`zephyr.shards.TokenShardReader`.)

Formats, chosen by extension (after removing a compression suffix ``.gz``, ``.zst``/``.zstd``):

* ``.jsonl``/``.json``/``.ndjson``: one JSON object per line; the document is a string field
  (``text`` by default, see :class:`JsonlReader`).
* ``.parquet``: a string column (``text`` by default, see :class:`ParquetReader`).
* ``.wet``/``.warc.wet.gz``: Common Crawl's plain-text conversions, one document per record; with
  ``record_fn``, WARC (``.warc``/``.warc.gz``) and WET records as dicts (:mod:`zephyr.warc`).
* anything else: plain UTF-8 text, one document per line or documents separated by blank lines
  (:class:`TextReader`).

Structured records: given ``record_fn``, the JSON-lines and Parquet readers hand each whole JSON
object (or Parquet row, as a dict of its columns) to ``record_fn`` and yield what it returns; a
``ValueError`` it raises is bad input like any other (one line naming file and line or record).

Paths are fsspec URLs (local, ``gs://``, ``memory://``, ``hf://`` when online). A source may be a
list of paths, globs or folders; :func:`expand_paths` turns it into files in sorted order.

Bad input is never silently dropped: by default it raises :class:`~zephyr.errors.DataError` whose
one-line message names the file and line (or record). With ``on_error="skip"`` each bad line is
skipped and counted in the shard's counters (``skipped_records``; a corrupt compressed stream
ends its file and counts in ``skipped_files``), and the driver reports the totals.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from zephyr.compression import Compression, decompression_errors, open_decompressed
from zephyr.errors import DataError
from zephyr.parquet_reader import ParquetReader
from zephyr.paths import expand_paths
from zephyr.reader_base import FileSlice, OnError, Reader, RecordFn, open_raw
from zephyr.warc import WarcReader, is_web_archive
from zephyr.worker_context import Counters

__all__ = [
    "Compression",
    "RecordFn",
    "FileSlice",
    "JsonlReader",
    "OnError",
    "ParquetReader",
    "Reader",
    "TextMode",
    "TextReader",
    "expand_paths",
    "read_documents",
    "read_records",
    "reader_for_path",
]

_JSONL_EXTENSIONS = (".jsonl", ".json", ".ndjson")
_PARQUET_EXTENSIONS = (".parquet",)


class TextMode(enum.Enum):
    """How a plain text file is cut into documents."""

    LINES = "lines"
    PARAGRAPHS = "paragraphs"


def _line_number_at(path: str, offset: int) -> int:
    """1-based number of the line that starts at byte ``offset`` of an uncompressed file."""
    count = 0
    with open_raw(path) as f:
        remaining = offset
        while remaining > 0:
            block = f.read(min(remaining, 1 << 22))
            if not block:
                break
            count += block.count(b"\n")
            remaining -= len(block)
    return count + 1


class _LineReader(Reader):
    """Shared line iteration with byte ranges, line numbers and decoding errors."""

    def splittable(self, path: str) -> bool:
        return Compression.of(path) is Compression.NONE

    def _lines(self, piece: FileSlice, counters: Counters | None) -> Iterator[tuple[int, str]]:
        """Yield ``(number, text_without_newline)`` for each line of ``piece``.

        ``number`` is the 1-based line number in the file, or, inside a byte range that does not
        start the file, ``-k`` for the k-th line of the range: counting the lines before a range
        means reading them, so only an error pays for it (see :meth:`_file_line_number`).
        """
        path = piece.path
        with open_raw(path) as raw:
            stream = open_decompressed(path, raw)
            in_range = piece.start > 0
            pos = 0
            if not piece.whole and Compression.of(path) is not Compression.NONE:
                raise ValueError(f"byte ranges of compressed files cannot be read: {path}")
            if in_range:
                # The line in progress at ``start`` belongs to the previous range.
                raw.seek(piece.start - 1)
                pos = piece.start - 1 + len(raw.readline())
            end = piece.end
            index = 0
            try:
                for raw_line in stream:
                    if end is not None and pos >= end:
                        break
                    pos += len(raw_line)
                    index += 1
                    number = -index if in_range else index
                    try:
                        text = raw_line.decode("utf-8")
                    except UnicodeDecodeError as e:
                        self._bad(counters, DataError(
                            path, f"line {self._file_line_number(piece, number)}",
                            f"not valid UTF-8 (byte 0x{raw_line[e.start]:02x} at column {e.start + 1})"))
                        continue
                    yield number, text.rstrip("\r\n")
            except decompression_errors() as e:
                kind = Compression.of(path).name.lower()
                self._bad(counters, DataError(path, f"line {index + 1}",
                                              f"corrupt {kind} stream: {type(e).__name__}: {e}"),
                          counter="skipped_files")

    @staticmethod
    def _file_line_number(piece: FileSlice, number: int) -> int:
        """The file line number of a line numbered by :meth:`_lines`."""
        if number > 0:
            return number
        with open_raw(piece.path) as f:
            f.seek(piece.start - 1)
            first = piece.start - 1 + len(f.readline())
        return _line_number_at(piece.path, first) + (-number) - 1


@dataclass(frozen=True)
class TextReader(_LineReader):
    """Plain UTF-8 text: one document per line, or documents separated by blank lines.

    Attributes:
        mode: ``LINES`` (each non-empty line is a document) or ``PARAGRAPHS`` (runs of
            non-blank lines separated by blank lines are documents, joined by ``\\n``).
        on_error: ``raise`` (default) or ``skip`` lines that are not valid UTF-8.
    """

    mode: TextMode = TextMode.LINES
    on_error: OnError = OnError.RAISE

    def __post_init__(self) -> None:
        if not isinstance(self.mode, TextMode):
            try:
                object.__setattr__(self, "mode", TextMode(self.mode))
            except ValueError:
                raise ValueError(f"mode must be one of 'lines', 'paragraphs', got {self.mode!r}") from None
        object.__setattr__(self, "on_error", OnError.coerce(self.on_error))

    def splittable(self, path: str) -> bool:
        return self.mode is TextMode.LINES and super().splittable(path)

    def read(self, piece: FileSlice, counters: Counters | None = None) -> Iterator[str]:
        if self.mode is TextMode.LINES:
            for _number, text in self._lines(piece, counters):
                if text.strip():
                    yield text
            return
        if not piece.whole:
            raise ValueError(f"paragraph mode reads whole files only, got a byte range of {piece.path}")
        paragraph: list[str] = []
        for _number, text in self._lines(piece, counters):
            if text.strip():
                paragraph.append(text)
            elif paragraph:
                yield "\n".join(paragraph)
                paragraph = []
        if paragraph:
            yield "\n".join(paragraph)


@dataclass(frozen=True)
class JsonlReader(_LineReader):
    """JSON lines: one object per line, the document is the string field ``text_field``.

    Attributes:
        text_field: name of the field holding the document text.
        on_error: ``raise`` (default) or ``skip`` lines that are not JSON objects with a string
            ``text_field`` (or not UTF-8).
        record_fn: if given, each object goes through it instead (see the module docstring).
    """

    text_field: str = "text"
    on_error: OnError = OnError.RAISE
    record_fn: RecordFn | None = None

    def __post_init__(self) -> None:
        if not self.text_field:
            raise ValueError(f"text_field must be a non-empty string, got {self.text_field!r}")
        object.__setattr__(self, "on_error", OnError.coerce(self.on_error))

    def read(self, piece: FileSlice, counters: Counters | None = None) -> Iterator[Any]:
        loads = json.loads
        field = self.text_field
        for number, line in self._lines(piece, counters):
            if not line.strip():
                continue
            try:
                obj = loads(line)
            except json.JSONDecodeError as e:
                self._bad(counters, DataError(piece.path, f"line {self._file_line_number(piece, number)}",
                                              f"invalid JSON ({e.msg} at column {e.colno})"))
                continue
            if self.record_fn is not None:
                try:
                    if not isinstance(obj, dict):
                        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
                    record = self.record_fn(obj)
                except ValueError as e:
                    self._bad(counters, DataError(piece.path, f"line {self._file_line_number(piece, number)}", str(e)))
                    continue
                yield record
                continue
            value = obj.get(field) if isinstance(obj, dict) else None
            if not isinstance(value, str):
                if not isinstance(obj, dict):
                    problem = f"expected a JSON object, got {type(obj).__name__}"
                elif field not in obj:
                    keys = ", ".join(sorted(obj)[:10]) or "none"
                    problem = f"no {field!r} field (fields: {keys})"
                else:
                    problem = f"field {field!r} is {type(value).__name__}, not a string"
                self._bad(counters, DataError(piece.path, f"line {self._file_line_number(piece, number)}",
                                              problem))
                continue
            # JSON's "\\ud800" escape decodes to a string that no tokenizer or UTF-8 file takes.
            surrogate = None if value.isascii() else _lone_surrogate(value)
            if surrogate is not None:
                self._bad(counters, DataError(piece.path, f"line {self._file_line_number(piece, number)}",
                                              f"field {field!r} is not valid Unicode (a lone surrogate at "
                                              f"character {surrogate})"))
                continue
            yield value


def reader_for_path(
    path: str,
    *,
    text_field: str = "text",
    text_mode: TextMode | str = TextMode.LINES,
    on_error: OnError | str = OnError.RAISE,
    record_fn: RecordFn | None = None,
) -> Reader:
    """The reader for ``path`` judged by its extension (see the module docstring).

    Raises:
        DataError: ``record_fn`` is given and ``path`` is neither JSON lines nor Parquet.
    """
    if is_web_archive(path):
        return WarcReader(on_error=on_error, record_fn=record_fn)  # type: ignore[arg-type]
    name = Compression.of(path).strip(path).lower()
    if name.endswith(_JSONL_EXTENSIONS):
        return JsonlReader(text_field=text_field, on_error=on_error, record_fn=record_fn)  # type: ignore[arg-type]
    if name.endswith(_PARQUET_EXTENSIONS):
        return ParquetReader(text_field=text_field, on_error=on_error, record_fn=record_fn)  # type: ignore[arg-type]
    if record_fn is not None:
        raise DataError(path, "", "structured records need JSON lines (.jsonl/.json) or Parquet, "
                                  "not a plain text file")
    return TextReader(mode=text_mode, on_error=on_error)  # type: ignore[arg-type]


def read_documents(
    source: str | Iterable[str],
    *,
    text_field: str = "text",
    text_mode: TextMode | str = TextMode.LINES,
    on_error: OnError | str = OnError.RAISE,
    counters: Counters | None = None,
) -> Iterator[str]:
    """Yield every document of ``source`` in this process, in file order."""
    return _read_in_order(source, counters, text_field=text_field, text_mode=text_mode, on_error=on_error)


def read_records(source: str | Iterable[str], record_fn: RecordFn, *, on_error: OnError | str = OnError.RAISE,
                 counters: Counters | None = None) -> Iterator[Any]:
    """Yield ``record_fn`` of every record of ``source`` (JSON lines or Parquet) in this process, in file order."""
    return _read_in_order(source, counters, on_error=on_error, record_fn=record_fn)


def _read_in_order(source: str | Iterable[str], counters: Counters | None, **reader_options: Any) -> Iterator[Any]:
    """Every item of every file of ``source``, each file read whole by ``reader_for_path(path,
    **reader_options)``, in file order (lazily: nothing is opened before the first item is asked for)."""
    for path in expand_paths(source):
        yield from reader_for_path(path, **reader_options).read(FileSlice(path), counters)


def _lone_surrogate(text: str) -> int | None:
    """The index of the first lone surrogate in ``text`` (None: there is none)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return None
