"""Turning a crawled page's bytes into text, or saying precisely why not.

Order of checks (the first that applies decides):

1. ``oversized``: more than ``max_bytes`` bytes (checked before anything is decoded);
2. ``empty``: no bytes, or only whitespace;
3. ``binary``: a known binary signature (PNG, GIF, JPEG, PDF, ZIP, gzip, ...), a NUL byte, or more
   than 10% control characters in the first 4 KiB;
4. charset: a byte-order mark wins; otherwise the charset declared by the HTTP headers (a web
   archive's response) or else in a ``<meta>`` tag of the first 4 KiB is tried strictly. A page whose declared charset fails, or that declares a
   single-byte charset while being valid non-ASCII UTF-8, is decoded with the charset that works
   (UTF-8, then resiliparse's detection, then windows-1252) and flagged ``wrong_charset``: kept,
   counted, named. When nothing decodes strictly, the page is ``undecodable``.
"""

from __future__ import annotations

import codecs
import enum
import re
from dataclasses import dataclass

__all__ = ["Decoded", "PageProblem", "check_text", "decode_page"]

_SNIFF = 4096
_MAGIC = (b"\x89PNG", b"GIF87a", b"GIF89a", b"\xff\xd8\xff", b"%PDF", b"PK\x03\x04", b"\x1f\x8b", b"BM",
          b"\x00\x00\x01\x00", b"OggS", b"ID3", b"fLaC", b"\x7fELF", b"RIFF")
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
_META_CHARSET = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
_SINGLE_BYTE = frozenset({"latin_1", "iso8859_1", "cp1252", "ascii", "iso8859_15", "cp1250", "cp1251"})
_CONTROL_LIMIT = 0.10


class PageProblem(enum.Enum):
    """Why a page gave no document (or, for ``WRONG_CHARSET``, what was repaired)."""

    OVERSIZED = "oversized"
    EMPTY = "empty"
    BINARY = "binary"
    UNDECODABLE = "undecodable"
    WRONG_CHARSET = "wrong_charset"
    NO_TEXT = "no_text"
    TOO_SHORT = "too_short"
    TRUNCATED = "truncated"
    """A web archive record the crawler (or the file's end) cut short."""
    BAD_GZIP = "bad_gzip"
    """A gzip member of a web archive that does not inflate (the records in it are lost)."""
    BAD_RECORD = "bad_record"
    """A web archive record that does not parse (the rest of its file is lost)."""
    NOT_HTML = "not_html"
    """A web archive response whose content type is not HTML (an image, a PDF ...)."""


@dataclass(frozen=True)
class Decoded:
    """A decoded page: its text (None when it has a fatal problem), the problem, and a detail."""

    html: str | None
    problem: PageProblem | None = None
    detail: str = ""
    plain: bool = False
    """The page is plain text already (a WET record): it is tidied, not extracted."""


def _codec(label: str) -> str | None:
    try:
        return codecs.lookup(label).name.replace("-", "_")
    except LookupError:
        return None


def _controls(sample: str | bytes) -> float:
    if not sample:
        return 0.0
    if isinstance(sample, bytes):
        bad = sum(1 for b in sample if b < 32 and b not in (9, 10, 12, 13))
    else:
        bad = sum(1 for ch in sample if ord(ch) < 32 and ch not in "\t\n\f\r")
    return bad / len(sample)


def check_text(html: str, max_bytes: int) -> Decoded:
    """The checks that apply to an already decoded page (a JSON-lines ``html`` field)."""
    if len(html) > max_bytes or len(html.encode("utf-8", errors="replace")) > max_bytes:
        return Decoded(None, PageProblem.OVERSIZED, f"more than {max_bytes} bytes")
    if not html.strip():
        return Decoded(None, PageProblem.EMPTY)
    sample = html[:_SNIFF]
    if "\x00" in sample or _controls(sample) > _CONTROL_LIMIT:
        return Decoded(None, PageProblem.BINARY, "control characters")
    return Decoded(html)


def _strict(data: bytes, codec: str) -> str | None:
    try:
        return data.decode(codec)
    except (UnicodeDecodeError, LookupError):
        return None


def decode_page(data: bytes, max_bytes: int, declared_charset: str | None = None) -> Decoded:
    """Decode a page's bytes (see the module docstring for the rules); ``declared_charset``, the
    one its HTTP headers declare (a web archive's response), comes before a ``<meta>`` tag's."""
    if len(data) > max_bytes:
        return Decoded(None, PageProblem.OVERSIZED, f"{len(data)} bytes > {max_bytes}")
    if not data.strip():
        return Decoded(None, PageProblem.EMPTY)
    head = data[:_SNIFF]
    if head.startswith(_MAGIC):
        return Decoded(None, PageProblem.BINARY, "binary file signature")
    for bom, codec in _BOMS:
        if data.startswith(bom):
            text = _strict(data, codec)
            if text is None:
                return Decoded(None, PageProblem.UNDECODABLE, f"invalid {codec} after its byte-order mark")
            return check_text(text, max_bytes)
    if b"\x00" in head or _controls(head) > _CONTROL_LIMIT:
        return Decoded(None, PageProblem.BINARY, "control bytes")
    match = _META_CHARSET.search(head)
    declared = _codec(declared_charset) if declared_charset else None
    if declared is None and match:
        declared = _codec(match.group(1).decode("ascii"))
    if declared is not None:
        text = _strict(data, declared)
        if text is not None:
            if declared in _SINGLE_BYTE and not data.isascii():
                utf8 = _strict(data, "utf-8")
                if utf8 is not None:
                    return Decoded(utf8, PageProblem.WRONG_CHARSET, f"declared {declared}, is utf-8")
            return Decoded(text)
    from resiliparse.parse.encoding import detect_encoding  # resiliparse: a compiled module, loaded on need

    detected = detect_encoding(data)
    for candidate in (_codec("utf-8"), _codec(detected) if detected else None, _codec("cp1252")):
        if candidate is None or candidate == declared:
            continue
        text = _strict(data, candidate)
        if text is not None:
            if declared is None:
                return Decoded(text)
            return Decoded(text, PageProblem.WRONG_CHARSET, f"declared {declared}, decoded as {candidate}")
    what = f"declared {declared}" if declared else "no declared charset"
    return Decoded(None, PageProblem.UNDECODABLE, f"{what}; no charset decodes it")
