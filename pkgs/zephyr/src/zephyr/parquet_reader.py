"""Parquet files (optionally whole-file gzip/zstd compressed): documents are a string column, or
records made from whole rows by ``record_fn`` (see :mod:`zephyr.readers`)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from zephyr.compression import Compression, decompression_errors, open_decompressed
from zephyr.errors import DataError
from zephyr.reader_base import FileSlice, OnError, Reader, RecordFn, open_raw
from zephyr.worker_context import Counters

__all__ = ["ParquetReader"]


@dataclass(frozen=True)
class ParquetReader(Reader):
    """Parquet files (optionally whole-file gzip/zstd compressed); documents are a string column.

    Attributes:
        text_field: name of the column holding the document text.
        batch_size: rows read at a time (bounds memory).
        on_error: ``raise`` (default) or ``skip`` rows whose text is null.
        record_fn: if given, each row (a dict of all columns) goes through it instead.
    """

    text_field: str = "text"
    batch_size: int = 4096
    on_error: OnError = OnError.RAISE
    record_fn: RecordFn | None = None

    def __post_init__(self) -> None:
        if not self.text_field:
            raise ValueError(f"text_field must be a non-empty string, got {self.text_field!r}")
        if self.batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {self.batch_size}")
        object.__setattr__(self, "on_error", OnError.coerce(self.on_error))

    def read(self, piece: FileSlice, counters: Counters | None = None) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = piece.path
        if not piece.whole:
            raise ValueError(f"parquet files are read whole, got a byte range of {path}")
        with open_raw(path) as raw:
            source: Any = raw
            if Compression.of(path) is not Compression.NONE:
                # Parquet needs random access, which a compressed stream cannot give.
                try:
                    source = io.BytesIO(open_decompressed(path, raw).read())
                except decompression_errors() as e:
                    self._bad(counters, DataError(path, "", f"corrupt compressed stream: {e}"), "skipped_files")
                    return
            # Damaged files fail in many ways: pyarrow's own errors (any ArrowException), OSError,
            # and, for string data that is no longer UTF-8, UnicodeDecodeError.
            unreadable = (pa.ArrowException, OSError, ValueError)
            try:
                parquet = pq.ParquetFile(source)
            except unreadable as e:
                raise DataError(path, "", f"not a readable parquet file: {type(e).__name__}: {e}") from None
            names = parquet.schema_arrow.names
            if self.record_fn is not None:
                yield from self._rows(parquet, path, counters, unreadable)
                return
            if self.text_field not in names:
                raise DataError(path, "", f"no {self.text_field!r} column (columns: {', '.join(names)})")
            row = 0
            try:
                for batch in parquet.iter_batches(batch_size=self.batch_size, columns=[self.text_field]):
                    column = batch.column(0)
                    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
                        raise DataError(path, "", f"column {self.text_field!r} is {column.type}, not a string")
                    for value in column.to_pylist():
                        row += 1
                        if value is None:
                            self._bad(counters, DataError(path, f"record {row - 1}",
                                                          f"column {self.text_field!r} is null"))
                            continue
                        yield value
            except DataError:
                raise
            except unreadable as e:
                raise DataError(path, f"record {row}", f"unreadable parquet data: {type(e).__name__}: {e}") from None

    def _rows(self, parquet: Any, path: str, counters: Counters | None,
              unreadable: tuple[type[BaseException], ...]) -> Iterator[Any]:
        assert self.record_fn is not None
        row = 0
        try:
            for batch in parquet.iter_batches(batch_size=self.batch_size):
                for obj in batch.to_pylist():
                    row += 1
                    try:
                        record = self.record_fn(obj)
                    except ValueError as e:
                        self._bad(counters, DataError(path, f"record {row - 1}", str(e)))
                        continue
                    yield record
        except DataError:
            raise
        except unreadable as e:
            raise DataError(path, f"record {row}", f"unreadable parquet data: {type(e).__name__}: {e}") from None
