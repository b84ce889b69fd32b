"""URL filtering as an attribute step: documents whose ``url`` is on a blocklist the user gives.

A blocklist is domains and substrings, given as lists or read from files (one entry a line,
blank lines and ``#`` comments skipped: a UT1 ``domains`` file, say). Nothing is downloaded.

* a domain blocks a URL whose host is that domain or below it: ``casino.example`` blocks
  ``https://casino.example/``, ``http://www.casino.example:8080/a`` and ``casino.example/x`` (a URL
  without a scheme), not ``notcasino.example``. Hosts and domains are compared lowercased, without
  a trailing dot; a domain given as ``*.casino.example`` or ``.casino.example`` means the same.
* a substring blocks a URL containing it, ignoring case (``/casino/``, ``porn``).

Documents come from WARC records (or any reader) with the URL in a field (``url`` unless
``url_field`` says otherwise); a document without one is never blocked, and counted ``no_url``.

Sidecar attributes: ``{"blocked": bool, "reason": "domain casino.example" | "substring porn" | None}``.
Summary: ``documents``, ``blocked``, ``no_url``, ``rules`` (domains and substrings in force) and
``by_rule`` (blocked documents per rule, most first). Made file by file
(:mod:`marin.processing.per_file`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from marin.execution.core.traits import StepTraits, step_function
from marin.processing.attributes import (
    DOCUMENT_SUFFIXES,
    Shard,
    iter_corpus,
    source_entries,
    write_sidecar,
    write_summary,
)
from marin.processing.incremental import IncrementalStart
from marin.processing.per_file import InputFile, PartOutput, input_files, map_files
from rigging import filesystem as fs
from zephyr import DataError

__all__ = ["Blocklist", "UrlFilterConfig", "normalize_domain", "read_entries", "url_filter_step"]

_MAX_BY_RULE = 50


def normalize_domain(entry: str) -> str:
    """A blocklist domain as hosts are compared: lowercased, without ``*.``, a leading or trailing dot.

    Raises:
        ValueError: ``entry`` is empty or holds a ``/``, a space or a ``:`` (it is no domain).
    """
    domain = entry.strip().lower().removeprefix("*.").strip(".")
    if not domain or any(c in domain for c in "/: \t"):
        raise ValueError(f"{entry!r} is not a domain (give a host name such as 'casino.example')")
    return domain


@dataclass(frozen=True)
class UrlFilterConfig:
    """Blocked domains and URL substrings."""

    input: Any
    """Documents with a URL field (folder, glob, list, or a step/handle output)."""
    domains: tuple[str, ...] = ()
    """Blocked domains (and every host below them)."""
    substrings: tuple[str, ...] = ()
    """Blocked URL substrings (case ignored)."""
    domain_files: tuple[Any, ...] = ()
    """Files of blocked domains, one a line."""
    substring_files: tuple[Any, ...] = ()
    """Files of blocked substrings, one a line."""
    url_field: str = "url"
    """The document field holding the URL."""

    def __post_init__(self) -> None:
        for name in ("domains", "substrings", "domain_files", "substring_files"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise ValueError(f"{name} must be a list, got the string {value!r}")
            object.__setattr__(self, name, tuple(value))
        object.__setattr__(self, "domains", tuple(normalize_domain(d) for d in self.domains))
        for entry in self.substrings:
            if not isinstance(entry, str) or not entry.strip():
                raise ValueError(f"a blocked substring must be a non-empty string, got {entry!r}")
        if not (self.domains or self.substrings or self.domain_files or self.substring_files):
            raise ValueError("give at least one blocked domain or substring (or a file of them)")
        if not self.url_field:
            raise ValueError("url_field must be a field name, got ''")


def read_entries(path: str) -> list[tuple[int, str]]:
    """The entries of a blocklist file with their line numbers: its lines, stripped, without blank
    lines and ``#`` comments.

    Raises:
        DataError: the file is missing or not UTF-8 text (naming it).
    """
    try:
        text = fs.read_bytes(path).decode("utf-8")
    except FileNotFoundError:
        raise DataError(path, "", "no such blocklist file") from None
    except UnicodeDecodeError as e:
        raise DataError(path, f"byte {e.start}", "a blocklist file must be UTF-8 text") from None
    return [(number, line.strip()) for number, line in enumerate(text.splitlines(), 1)
            if line.strip() and not line.strip().startswith("#")]


class Blocklist:
    """Domains and substrings, matched against URLs (see the module docstring)."""

    def __init__(self, domains: Iterable[str], substrings: Iterable[str]) -> None:
        self.domains = frozenset(normalize_domain(d) for d in domains)
        self.substrings = tuple(dict.fromkeys(s.lower() for s in substrings))
        # One alternation, longest first, so the reason names the longest substring found there.
        ordered = sorted(self.substrings, key=lambda s: (-len(s), s))
        self._substring = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    @classmethod
    def of(cls, config: UrlFilterConfig) -> Blocklist:
        """The blocklist of ``config``, its files read (naming a bad line's file and line)."""
        domains = list(config.domains)
        for path in (p for f in config.domain_files for p in source_entries(f)):
            for number, entry in read_entries(path):
                try:
                    domains.append(normalize_domain(entry))
                except ValueError as e:
                    raise DataError(path, f"line {number}", str(e)) from None
        substrings = list(config.substrings)
        for path in (p for f in config.substring_files for p in source_entries(f)):
            substrings.extend(entry for _number, entry in read_entries(path))
        return cls(domains, substrings)

    def reason(self, url: str) -> str | None:
        """Why ``url`` is blocked (``"domain d"`` or ``"substring s"``), or None."""
        lowered = url.strip().lower()
        host = _host(lowered)
        if host:
            labels = host.split(".")
            for k in range(len(labels)):
                if ".".join(labels[k:]) in self.domains:
                    return f"domain {'.'.join(labels[k:])}"
        found = self._substring.search(lowered) if self._substring is not None else None
        return f"substring {found.group(0)}" if found else None


def _host(url: str) -> str:
    try:
        parts = urlsplit(url if "//" in url.split("?", 1)[0] else "//" + url)
        return (parts.hostname or "").rstrip(".")
    except ValueError:  # a malformed URL (a bad port or IPv6 literal) has no host to compare
        return ""


@step_function(StepTraits(plan_start=IncrementalStart(("input",))))
def url_filter_step(config: UrlFilterConfig, output_path: str) -> None:
    """Step function: ``{blocked, reason}`` sidecars and ``_summary.json`` (see the module docstring)."""
    blocklist = Blocklist.of(config)  # first: a bad file fails the step even when every shard is reused

    def one(f: InputFile) -> PartOutput:
        shard = Shard(f.path, f.name)
        ids, attributes, no_url = [], [], 0
        for _index, doc in iter_corpus([shard]):
            url = doc.get(config.url_field)
            no_url += not isinstance(url, str) or not url.strip()
            reason = blocklist.reason(url) if isinstance(url, str) and url.strip() else None
            ids.append(doc["id"])
            attributes.append({"blocked": reason is not None, "reason": reason})
        write_sidecar(output_path, shard, ids, attributes)
        by_rule = Counter(a["reason"] for a in attributes if a["reason"])
        return PartOutput((f.name,), {"documents": len(ids), "no_url": no_url, "by_rule": dict(by_rule)})

    parts = map_files(input_files(config.input, DOCUMENT_SUFFIXES), output_path, one)
    by_rule: Counter[str] = Counter()
    for p in parts:
        by_rule.update(p.stats["by_rule"])
    write_summary(output_path, {
        "step": "url_filter", "shards": len(parts), "documents": sum(p.stats["documents"] for p in parts),
        "blocked": sum(by_rule.values()), "no_url": sum(p.stats["no_url"] for p in parts),
        "rules": {"domains": len(blocklist.domains), "substrings": len(blocklist.substrings)},
        "by_rule": dict(sorted(by_rule.items(), key=lambda kv: (-kv[1], kv[0]))[:_MAX_BY_RULE]),
    })
