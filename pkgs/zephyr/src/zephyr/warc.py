"""Web archives: WARC response records and WET conversion records, read as they stream (fastwarc).

A WARC file (``.warc``, ``.warc.gz``: gzip per record or over the whole file, both read the same)
holds a crawl's HTTP responses; a WET file (``.wet``, ``.warc.wet.gz``, as Common Crawl names them)
holds the plain text Common Crawl converted them to. Each record read is a :class:`WebRecord`:
its id (``WARC-Record-ID``), URL, date, the payload's content type and charset (from the HTTP
headers of a response; ``text/plain`` and UTF-8 for a conversion), and its payload.

Nothing in a crawl is fatal, because crawls are never clean: a record the crawler cut short
(``WARC-Truncated``, or a file that ends inside a record) comes with ``problem="truncated"``, and a
gzip member or record that cannot be parsed ends the file with one record whose problem is
``bad_gzip`` (or ``bad_record``) naming the byte offset: what comes after it cannot be found
again in the stream. The reader of the pages decides what to do with each (html_to_text counts
and names them in its summary).

:func:`write_web_archive` writes such files (generated corpora, tests).
"""

from __future__ import annotations

import datetime as _dt
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from zephyr.errors import DataError
from zephyr.reader_base import FileSlice, OnError, Reader, RecordFn, open_raw
from zephyr.worker_context import Counters

__all__ = ["WARC_SUFFIXES", "WET_SUFFIXES", "WarcReader", "WebRecord", "is_web_archive", "is_wet", "read_web_records",
           "write_web_archive"]

WET_SUFFIXES = (".wet", ".wet.gz")
WARC_SUFFIXES = (".warc", ".warc.gz")
TRUNCATED = "truncated"
BAD_GZIP = "bad_gzip"
BAD_RECORD = "bad_record"


@dataclass(frozen=True)
class WebRecord:
    """One response (WARC) or conversion (WET) record."""

    id: str
    """``WARC-Record-ID`` (``<urn:uuid:...>``), or ``<path>@<offset>`` for a record that could not be parsed."""
    url: str | None
    date: str | None
    """``WARC-Date`` as written (ISO 8601)."""
    content_type: str | None
    """The payload's media type (``text/html``): the HTTP ``Content-Type``; ``text/plain`` for WET."""
    charset: str | None
    """The charset the HTTP headers declare (None when they declare none); ``utf-8`` for WET."""
    payload: bytes
    """The HTTP body of a response (transfer and content encodings removed), a conversion's text."""
    problem: str | None = None
    """``truncated``, ``bad_gzip`` or ``bad_record`` (see the module docstring); None when whole."""
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        """The record as JSON-ready fields, the payload as text (WET) or left out (WARC)."""
        out = {"id": self.id, "url": self.url, "date": self.date, "content_type": self.content_type,
               "charset": self.charset, "problem": self.problem}
        if self.content_type == "text/plain":
            out["text"] = self.payload.decode("utf-8", errors="replace")
        return out


def is_web_archive(path: str) -> bool:
    """True for a WARC or WET file, by its name."""
    return path.lower().endswith(WARC_SUFFIXES + WET_SUFFIXES)


def is_wet(path: str) -> bool:
    """True for a WET file (Common Crawl's plain-text conversions), by its name."""
    return path.lower().endswith(WET_SUFFIXES)


def _media_type(value: str | None) -> str | None:
    return value.split(";", 1)[0].strip().lower() or None if value else None


def _record(record: Any, wet: bool) -> WebRecord:
    """A :class:`WebRecord` of a parsed fastwarc record (its payload read whole)."""
    headers = record.headers
    payload = record.reader.read()
    truncated = headers.get("WARC-Truncated")
    problem, detail = None, ""
    if truncated:
        problem, detail = TRUNCATED, f"WARC-Truncated: {truncated}"
    elif len(payload) < record.content_length:
        # The stream ended inside the record (content_length: what its headers promised after them).
        problem, detail = TRUNCATED, f"{len(payload)} of {record.content_length} bytes: the file ends inside it"
    if wet:
        content_type, charset = "text/plain", "utf-8"
    else:
        content_type, charset = _media_type(record.http_content_type), record.http_charset or None
    return WebRecord(str(record.record_id), headers.get("WARC-Target-URI"), headers.get("WARC-Date"),
                     content_type, charset.lower() if charset else None, payload, problem, detail)


_GZIP_MAGIC = b"\x1f\x8b\x08"


def _next_member(raw: Any, start: int) -> int | None:
    """The offset of the first gzip member header at or after ``start`` in ``raw``, or None."""
    raw.seek(start)
    tail = b""
    position = start
    while chunk := raw.read(1 << 20):
        found = (tail + chunk).find(_GZIP_MAGIC)
        if found >= 0:
            return position - len(tail) + found
        tail, position = chunk[-2:], position + len(chunk)
    return None


def _records_from(raw: Any, offset: int, path: str, wet: bool) -> Iterator[WebRecord | int]:
    """The records from byte ``offset`` on; after a bad gzip member, the offset to go on from (the
    next member's) as the last item."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType  # compiled; only archive readers load it

    raw.seek(offset)
    kind = WarcRecordType.conversion if wet else WarcRecordType.response
    records = ArchiveIterator(raw, record_types=kind, parse_http=not wet, auto_decode="all")
    last, last_start = None, None
    while True:
        try:
            record = next(records)
        except StopIteration:
            return
        except Exception as e:  # noqa: BLE001 - fastwarc raises plain exceptions for corrupt input
            gzip_error = "zip" in str(e).lower() or "inflat" in str(e).lower()
            where = f"after record {last}" if last else f"at byte {offset}"
            rest = "reading on from the next gzip member" if gzip_error else "the rest of the file is unreadable"
            yield WebRecord(f"{path}@{where}", None, None, None, None, b"", BAD_GZIP if gzip_error else BAD_RECORD,
                            f"{where}: {type(e).__name__}: {e}; {rest}")
            if gzip_error:
                # stream_pos is the offset in the file of a record's gzip member (seeks included).
                bad = _next_member(raw, last_start + 1 if last_start is not None else offset)
                resume = _next_member(raw, bad + 1) if bad is not None else None
                if resume is not None:
                    yield resume
            return
        last_start = record.stream_pos
        found = _record(record, wet)
        last = found.id
        yield found


def read_web_records(path: str) -> Iterator[WebRecord]:
    """Every response record of a WARC file, or conversion record of a WET file, in file order."""
    wet = is_wet(path)
    with open_raw(path) as raw:
        offset: int | None = 0
        while offset is not None:
            start, offset = offset, None
            for item in _records_from(raw, start, path, wet):
                if isinstance(item, int):
                    offset = item
                else:
                    yield item


@dataclass(frozen=True)
class WarcReader(Reader):
    """Documents of web archives: a WET file's texts, or (``record_fn``) each record of a WARC or
    WET file as the dict :meth:`WebRecord.to_json` makes, passed to ``record_fn``. A record with a
    problem is bad input (raised, or skipped and counted) for documents, and handed on as it is to
    ``record_fn``, which decides."""

    on_error: OnError = OnError.RAISE
    record_fn: RecordFn | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "on_error", OnError.coerce(self.on_error))

    def read(self, piece: FileSlice, counters: Counters | None = None) -> Iterator[Any]:
        if not piece.whole:
            raise ValueError(f"{piece.path}: web archives are read whole, not by byte ranges")
        if self.record_fn is None and not is_wet(piece.path):
            raise DataError(piece.path, "", "a WARC file holds pages, not documents: extract them with html_to_text")
        for record in read_web_records(piece.path):
            if self.record_fn is not None:
                yield self.record_fn(record.to_json())
            elif record.problem is not None:
                self._bad(counters, DataError(piece.path, f"record {record.id}", f"{record.problem}: {record.detail}"))
            else:
                yield record.payload.decode("utf-8", errors="replace")


def write_web_archive(path: str, records: Iterable[WebRecord], *, gzip: bool = True) -> None:
    """Write ``records`` as a WARC (responses, with HTTP headers made from each record's content
    type and charset) or a WET file (conversions), by ``path``'s name; each record its own gzip
    member when ``gzip``. Records keep their ids and dates, so the same records make the same bytes;
    a record whose problem is ``truncated`` is marked ``WARC-Truncated: length``."""
    from fastwarc.stream_io import GzipWriter  # compiled; only writers of archives load it
    from fastwarc.warc import WarcRecord, WarcRecordType

    from rigging import filesystem as fs

    wet = is_wet(path)
    out = io.BytesIO()
    for r in records:
        record = WarcRecord()
        record.init_headers(WarcRecordType.conversion if wet else WarcRecordType.response,
                            r.id.removeprefix("<urn:").removesuffix(">").encode())
        record.headers["WARC-Date"] = r.date or _dt.datetime(2026, 1, 1, tzinfo=_dt.UTC).isoformat()
        if r.url:
            record.headers["WARC-Target-URI"] = r.url
        if r.problem == TRUNCATED:
            record.headers["WARC-Truncated"] = "length"  # the crawler's mark: it stored only the first bytes
        if wet:
            record.headers["Content-Type"] = "text/plain"
            record.set_bytes_content(r.payload)
        else:
            record.headers["Content-Type"] = "application/http; msgtype=response"
            media = r.content_type or "text/html"
            head = f"HTTP/1.1 200 OK\r\nContent-Type: {media}{f'; charset={r.charset}' if r.charset else ''}\r\n"
            record.set_bytes_content(head.encode("ascii") + f"Content-Length: {len(r.payload)}\r\n\r\n".encode()
                                     + r.payload)
        member = io.BytesIO()
        stream = GzipWriter(member) if gzip else member
        record.write(stream, checksum_data=True)
        if gzip:
            stream.close()  # type: ignore[union-attr]
        out.write(member.getvalue())
    fs.atomic_write(path, out.getvalue())
