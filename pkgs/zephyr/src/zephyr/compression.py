"""Whole-file compression of inputs (gzip, zstd), judged by the file name, and streams that refuse cut files."""

from __future__ import annotations

import enum
import gzip
import io
import zlib
from typing import IO, Any

__all__ = ["Compression", "decompression_errors", "open_decompressed"]


class Compression(enum.Enum):
    """Whole-file compression, detected from the file name."""

    NONE = ""
    GZIP = ".gz"
    ZSTD = ".zst"

    @classmethod
    def of(cls, path: str) -> Compression:
        """The compression of ``path`` judged by its last extension."""
        lower = path.lower()
        if lower.endswith(".gz"):
            return cls.GZIP
        if lower.endswith((".zst", ".zstd")):
            return cls.ZSTD
        return cls.NONE

    def strip(self, path: str) -> str:
        """``path`` without its compression suffix."""
        if self is Compression.NONE:
            return path
        return path[: path.rfind(".")]


def open_decompressed(path: str, raw: IO[bytes]) -> IO[bytes]:
    """``raw`` (the bytes of ``path``) decompressed as its name says; an empty or cut stream raises."""
    compression = Compression.of(path)
    if compression is Compression.GZIP:
        return gzip.GzipFile(fileobj=_NotEmpty(raw), mode="rb")
    if compression is Compression.ZSTD:
        return io.BufferedReader(_ZstdFrames(raw), buffer_size=1 << 20)
    return raw


class _NotEmpty:
    """A file whose first read must give bytes: an empty compressed file is a cut one, not no data.

    (A compressed stream of nothing still holds a header; a zero-byte ``.gz`` is typically what a
    killed writer leaves, and ``gzip`` would read it as a silently empty file.)
    """

    def __init__(self, raw: IO[bytes]):
        self._raw = raw
        self._started = False

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        if not self._started and size != 0:
            if not data:
                raise EOFError("empty file: a compressed stream holds at least a header")
            self._started = True
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class _ZstdFrames(io.RawIOBase):
    """Decompresses a stream of concatenated zstd frames, refusing one that ends inside a frame.

    ``zstandard``'s own ``stream_reader`` reports a truncated file as a clean end of stream, which
    would read as a silently short corpus; here it raises ``ZstdError`` like a damaged frame.
    """

    _CHUNK = 1 << 16  # raw bytes per decompress call: bounds what one call can expand to

    def __init__(self, raw: IO[bytes]):
        import zstandard

        self._zstd = zstandard
        self._raw = raw
        self._dctx = zstandard.ZstdDecompressor()
        self._frame: Any = None  # decompressor of the frame in progress (None between frames)
        self._out = b""
        self._pos = 0
        self._done = False
        self._started = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._pos >= len(self._out) and not self._done:
            self._fill()
        n = min(len(buffer), len(self._out) - self._pos)
        buffer[:n] = self._out[self._pos:self._pos + n]
        self._pos += n
        return n

    def _fill(self) -> None:
        data = self._raw.read(self._CHUNK)
        if not data:
            self._done = True
            if self._frame is not None:
                raise self._zstd.ZstdError("stream ends inside a frame (truncated file?)")
            if not self._started:
                raise self._zstd.ZstdError("empty file: a compressed stream holds at least a header")
            return
        self._started = True
        pieces = []
        while data:
            if self._frame is None:
                self._frame = self._dctx.decompressobj()
            pieces.append(self._frame.decompress(data))
            if self._frame.eof:
                data = self._frame.unused_data
                self._frame = None
            else:
                data = b""
        self._out = b"".join(pieces)
        self._pos = 0


def decompression_errors() -> tuple[type[BaseException], ...]:
    """What reading a damaged compressed stream raises."""
    import zstandard

    # EOFError: a gzip stream cut short; zlib.error / BadGzipFile: damaged bytes.
    return (gzip.BadGzipFile, EOFError, zlib.error, zstandard.ZstdError)
