"""Handles for the rules web data meets on its way in: each document's language, URL blocklists
and PII redaction. ``language_id`` and ``url_filter`` write sidecars (attributes) that
``consolidate`` turns into decisions (``keep_languages(...)``, the url_filter handle itself);
``pii`` rewrites the documents, so its handle is a source for the steps after it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from marin.execution.core.lazy import StepHandle
from marin.experiment.datakit.inputs import check_options, document_source, variant
from marin.processing.language import LanguageIdConfig, LanguageModel, language_id_step
from marin.processing.pii import PiiConfig, pii_step
from marin.processing.urls import UrlFilterConfig, url_filter_step

__all__ = ["LanguageIdentified", "Redacted", "UrlFiltered", "language_id", "pii", "url_filter"]


class LanguageIdentified(StepHandle, fn=language_id_step):
    """Each document's language: ``{language, score}`` per document."""


def language_id(name: str, source: Any, model: LanguageModel | str = LanguageModel.LANGID, *,
                version: str = "v1") -> LanguageIdentified:
    """The language of every document of ``source``, and the model's score for it.

    Args:
        name: the step's name.
        source: documents.
        model: ``"langid"`` (:class:`~marin.processing.language.LanguageModel`): langid.py's model,
            shipped inside the ``py3langid`` wheel (BSD-3-Clause; 139 languages).
        version: as for every step.

    Raises:
        ValueError: a bad source or model (named).
    """
    return LanguageIdentified(name, LanguageIdConfig(input=document_source(source),
                                                     model=variant(LanguageModel, model, "model")), version=version)


class UrlFiltered(StepHandle, fn=url_filter_step):
    """Documents whose URL is on a blocklist: ``{blocked, reason}`` per document."""


def _entries(value: Iterable[str] | None, what: str, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        raise ValueError(f"url_filter {name!r}: {what} must be a list of strings (a file goes in "
                         f"{what}_file=), got the string {value!r}")
    entries = tuple(value)
    bad = [e for e in entries if not isinstance(e, str) or not e.strip()]
    if bad:
        raise ValueError(f"url_filter {name!r}: {what} must be non-empty strings, got {bad[0]!r}")
    return entries


def _files(value: Any, what: str) -> tuple[Any, ...]:
    if value is None:
        return ()
    given = [value] if isinstance(value, str) or not isinstance(value, list | tuple) else list(value)
    return tuple(document_source(v, what) for v in given)


def url_filter(name: str, source: Any, domains: Iterable[str] | None = None, substrings: Iterable[str] | None = None,
               *, domains_file: Any = None, substrings_file: Any = None, url_field: str = "url",
               version: str = "v1") -> UrlFiltered:
    """Documents of ``source`` whose URL is blocked by a domain or a substring, as attributes.

    Give the blocklist as lists, files (one entry a line, ``#`` comments; their content is part of
    the step's identity), or both.

    Args:
        name: the step's name.
        source: documents with a URL field (from WARC records, say).
        domains: blocked domains; every host below one is blocked too.
        substrings: blocked URL substrings (case ignored).
        domains_file: a file (or list of files) of blocked domains.
        substrings_file: a file (or list of files) of blocked substrings.
        url_field: the document field holding the URL.
        version: as for every step.

    Raises:
        ValueError: a bad source, an entry that is no domain, or no blocklist at all (named).
    """
    try:
        config = UrlFilterConfig(
            input=document_source(source), domains=_entries(domains, "domains", name),
            substrings=_entries(substrings, "substrings", name),
            domain_files=_files(domains_file, "domains_file"), substring_files=_files(substrings_file, "substrings_file"),
            url_field=url_field)
    except ValueError as e:
        raise ValueError(f"url_filter {name!r}: {e}") from None
    return UrlFiltered(name, config, version=version)


class Redacted(StepHandle, fn=pii_step):
    """Documents with their e-mail addresses and public IP addresses (and phone numbers if asked) replaced."""


def pii(name: str, source: Any, *, phones: bool = False, version: str = "v1", **options: Any) -> Redacted:
    """The documents of ``source`` with their PII replaced by placeholders (see :mod:`marin.processing.pii`).

    Args:
        name: the step's name.
        source: documents.
        phones: replace phone numbers too.
        version: as for every step.
        options: other fields of :class:`~marin.processing.pii.PiiConfig` (``emails``, ``ips``,
            ``only_public_ips``, ``email_replacements``, ...).

    Raises:
        ValueError: a bad source, an unknown option or a bad value (named).
    """
    check_options(options, PiiConfig, "pii")
    try:
        config = PiiConfig(input=document_source(source), phones=phones, **options)
    except ValueError as e:
        raise ValueError(f"pii {name!r}: {e}") from None
    return Redacted(name, config, version=version)
