"""PII redaction as a text-rewriting step: e-mail addresses and public IP addresses (and, when
asked, phone numbers) in each document's text are replaced by placeholders, as datatrove's PII
formatter does for FineWeb.

* e-mail addresses: a local part of RFC 5322's atom characters (dots between them), ``@``, and a
  host name whose last label is letters (``name.surname+tag@mail.example.co.uk``); addresses at
  domains reserved for documentation (``example.com``, ``example.org``, ``example.net``, and
  ``.example``, ``.invalid``, ``.test``: RFC 2606) name no one and are kept. They are found from
  each ``@`` outwards (:func:`email_spans`), not by a pattern tried at every character: a run of
  atom characters with no ``@`` after it (a line of dashes, base64) costs one pass, not one per
  character it holds;
* IPv4 addresses: four dotted numbers of 0 to 255 that are not part of a longer dotted number (a
  version ``1.2.3.4.5`` is none); only public ones (``ipaddress``'s ``is_global``) unless
  ``only_public_ips`` is off: private, loopback and reserved addresses (``10.0.0.1``,
  ``192.168.1.1``, ``127.0.0.1``) name no one and are kept, as datatrove keeps them;
* phone numbers (off by default), 9 to 15 digits (E.164's most) written as phone numbers are:
  ``+`` and a country code then groups (``+44 20 7946 0958``, ``+1-202-555-0143``), an area code in
  parentheses (``(555) 123-4567``), ``555-123-4567`` or ``555.123.4567``, or a national number
  after its trunk ``0`` in groups (``020 7946 0958``, ``06 12 34 56 78``). Dates, years and
  numbers with thousands separators are not phone numbers.

Every kind is found in time linear in the text's length, whatever the text (a megabyte of
dashes, digits or base64 in one crawled document); tests feed each rule adversarial input of two
sizes and compare the times.

Each kind's placeholders are used in turn within a document (the first match takes the first,
the next the second, ...), so the output depends only on the document. The placeholders are
reserved for documentation and so never themselves replaced on a second pass: ``example.com`` and
``example.org`` addresses (RFC 2606), ``192.0.2.0/24``, ``198.51.100.0/24`` and ``203.0.113.0/24``
addresses (RFC 5737), and a ``555-01xx`` number (reserved for fiction in North America).

Output: the documents, every field kept, ``text`` rewritten, in shards named like the input's
(made file by file, :mod:`marin.processing.per_file`), and ``_summary.json``: ``documents``,
``edited`` (documents with a replacement) and ``replaced`` per kind. Nothing found is written
anywhere else: the summary counts, it does not quote.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from marin.execution.core.traits import StepTraits, step_function
from marin.processing.attributes import DOCUMENT_SUFFIXES, read_documents, write_jsonl, write_summary
from marin.processing.incremental import IncrementalStart
from marin.processing.per_file import InputFile, PartOutput, input_files, map_files
from rigging import filesystem as fs

__all__ = ["PiiConfig", "email_spans", "pii_step", "redact"]

# An e-mail address is ``ATOM(.ATOM)*@(LABEL.)+TLD`` (ATOM: RFC 5322's atom characters), not
# preceded by a word character, ``.`` or ``@``, nor followed by a word character, ``-`` or ``.``
# and a word character. The local part is found by walking back from each ``@`` (email_spans):
# tried at every character, as a regular expression is, a long run of atom characters with no
# ``@`` after it is scanned once per character it holds (quadratic time).
_ATOM_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+/=?^_`{|}~-")
_NOT_BEFORE_EMAIL = re.compile(r"[\w.@]")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# Matched once per ``@``, at the character after it; a host name holds no ``@``, so each character
# is looked at by the one ``@`` before it (labels are at most 63 characters: backing off is bounded).
_EMAIL_HOST = re.compile(rf"(?:{_LABEL}\.)+[A-Za-z]{{2,63}}(?![\w-]|\.\w)")
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4 = re.compile(rf"(?<![\w.]){_OCTET}(?:\.{_OCTET}){{3}}(?!\.?\d|\w)")
_PHONE = re.compile(
    r"(?<![\w+])(?<!\d[ .-])(?:"
    r"\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]?\d{2,4}){1,5}"  # +44 20 7946 0958
    r"|\(\d{2,4}\)[ .-]?\d{3,4}[ .-]\d{3,4}"  # (555) 123-4567
    r"|\d{3}[.-]\d{3}[.-]\d{4}"  # 555-123-4567
    r"|0[1-9]\d{0,3}(?:[ .-]\d{2,4}){2,4}"  # a national number after its trunk 0: 020 7946 0958
    r")(?![\w-]|[.]\d)")


@dataclass(frozen=True)
class PiiConfig:
    """What to replace in each document's text, and with what."""

    input: Any
    """Documents (folder, glob, list, or a step/handle output)."""
    emails: bool = True
    """Replace e-mail addresses."""
    ips: bool = True
    """Replace IPv4 addresses."""
    only_public_ips: bool = True
    """Replace only public IP addresses (private, loopback and reserved ones are kept)."""
    phones: bool = False
    """Replace phone numbers."""
    email_replacements: tuple[str, ...] = ("name@example.com", "first.last@example.org")
    """Placeholders for e-mail addresses, used in turn within a document."""
    ip_replacements: tuple[str, ...] = ("192.0.2.10", "198.51.100.20", "203.0.113.30")
    """Placeholders for IP addresses, used in turn."""
    phone_replacements: tuple[str, ...] = ("+1 555 0100",)
    """Placeholders for phone numbers, used in turn."""

    def __post_init__(self) -> None:
        for name in ("email_replacements", "ip_replacements", "phone_replacements"):
            value = getattr(self, name)
            if isinstance(value, str) or not value or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{name} must be a non-empty tuple of strings, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        if not (self.emails or self.ips or self.phones):
            raise ValueError("nothing to replace: emails, ips and phones are all off")


_RESERVED_DOMAINS = ("example.com", "example.org", "example.net")
_RESERVED_TLDS = (".example", ".invalid", ".test")


def _names_someone(found: str) -> bool:
    """An address at a domain reserved for documentation (RFC 2606) names no one: it is kept.
    (String tests, not a pattern: a host name may be thousands of labels long.)"""
    host = found.rpartition("@")[2].lower()
    return not (host in _RESERVED_DOMAINS or host.endswith(tuple("." + d for d in _RESERVED_DOMAINS))
                or host.endswith(_RESERVED_TLDS))


def _local_part_start(text: str, at: int, since: int) -> int | None:
    """Where the local part of an address whose ``@`` is at ``at`` starts: the leftmost position
    from ``since`` on that a regular expression for it would start from, or None when none.

    Walks back over the atom characters and dots before ``@`` (which hold no ``@``: each character
    is walked once per text). A start is an atom character not preceded by a word character, a
    dot or ``@``, with no ``..`` between it and ``@``, which follows an atom character.
    """
    if at == 0 or text[at - 1] not in _ATOM_CHARS:
        return None
    found = None
    i = at - 1
    while i >= since:
        c = text[i]
        if c == ".":
            if text[i + 1] == ".":
                break  # ".." : no local part reaches across it
        elif c not in _ATOM_CHARS:
            break
        elif i == 0 or _NOT_BEFORE_EMAIL.match(text, i - 1) is None:
            found = i
        i -= 1
    return found


def email_spans(text: str) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each e-mail address in ``text``, left to right, not overlapping: the
    matches a regular expression for them would find (see the module docstring), in linear time."""
    since = 0
    at = text.find("@")
    while at != -1:
        start = _local_part_start(text, at, since)
        host = _EMAIL_HOST.match(text, at + 1) if start is not None else None
        if start is not None and host is not None:
            yield start, host.end()
            since = host.end()
        at = text.find("@", max(at + 1, since))


def _is_phone(found: str) -> bool:
    digits = sum(c.isdigit() for c in found)
    return 9 <= digits <= 15


def _pattern_spans(pattern: re.Pattern[str]) -> Callable[[str], Iterable[tuple[int, int]]]:
    return lambda text: (m.span() for m in pattern.finditer(text))


def _replacer(find: Callable[[str], Iterable[tuple[int, int]]], replacements: tuple[str, ...],
              accept: Callable[[str], bool], counts: Counter[str], kind: str) -> Callable[[str], str]:
    def substitute(text: str) -> str:
        pieces, done = [], 0
        for start, end in find(text):
            if not accept(text[start:end]):
                continue
            counts[kind] += 1
            pieces += [text[done:start], replacements[(counts[kind] - 1) % len(replacements)]]
            done = end
        return "".join(pieces) + text[done:] if pieces else text

    return substitute


def _public(only_public: bool) -> Callable[[str], bool]:
    return lambda found: not only_public or ipaddress.ip_address(found).is_global


def redact(text: str, config: PiiConfig) -> tuple[str, dict[str, int]]:
    """``text`` with its PII replaced (see the module docstring), and the replacements per kind."""
    counts: Counter[str] = Counter()
    steps = []
    if config.emails:
        steps.append(_replacer(email_spans, config.email_replacements, _names_someone, counts, "emails"))
    if config.ips:
        steps.append(_replacer(_pattern_spans(_IPV4), config.ip_replacements, _public(config.only_public_ips), counts, "ips"))
    if config.phones:
        steps.append(_replacer(_pattern_spans(_PHONE), config.phone_replacements, _is_phone, counts, "phones"))
    for step in steps:
        text = step(text)
    return text, dict(counts)


@step_function(StepTraits(plan_start=IncrementalStart(("input",))))
def pii_step(config: PiiConfig, output_path: str) -> None:
    """Step function: the redacted documents and ``_summary.json`` (see the module docstring)."""
    kinds = [k for k in ("emails", "ips", "phones") if getattr(config, k)]

    def one(f: InputFile) -> PartOutput:
        rows, replaced, edited = [], Counter[str](), 0
        for doc in read_documents(f.path):
            text, counts = redact(doc["text"], config)
            edited += bool(counts)
            replaced.update(counts)
            rows.append({**doc, "text": text})
        write_jsonl(fs.join(output_path, f.name), rows)
        return PartOutput((f.name,), {"documents": len(rows), "edited": edited,
                                      "replaced": {k: replaced[k] for k in kinds}})

    parts = map_files(input_files(config.input, DOCUMENT_SUFFIXES), output_path, one)
    write_summary(output_path, {
        "step": "pii", "shards": len(parts), "documents": sum(p.stats["documents"] for p in parts),
        "edited": sum(p.stats["edited"] for p in parts),
        "replaced": {k: sum(p.stats["replaced"][k] for p in parts) for k in kinds},
    })
