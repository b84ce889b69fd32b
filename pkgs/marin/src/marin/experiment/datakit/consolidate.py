"""``consolidate(name, source, filters=[...])``: the documents every filter allows, ready to tokenize.

A filter is an attribute handle built on the same source, or a rule on one:

* a ``dedup`` handle: exact or fuzzy duplicates go, each cluster's representative stays; an
  ``exact_paragraph`` one cuts the duplicate paragraphs out of the text instead;
* a ``decontaminate`` handle: contaminated documents go;
* a ``heuristics`` handle: documents that fail its rules go;
* ``keep(classified, min_score=...)`` or ``keep(classified, top_fraction=...)``: documents scored
  below the bar go (a ``classify`` handle needs such a rule: scores alone decide nothing);
* ``keep_languages(identified, ["en"], min_score=0.65)``: documents in other languages, or
  identified with a lower score, go (a ``language_id`` handle needs such a rule);
* a ``url_filter`` handle: documents whose URL it blocked go.

Filters apply in order and each is named after its step in the summary (``removed``, ``examples``),
so two filters must be different steps. The output is JSON-lines shards named like the source's,
which ``tokenized(source=<this handle>)`` reads.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from marin.execution.core.lazy import StepHandle
from marin.execution.core.sources import Source
from marin.experiment.datakit.attributes import (
    Classified,
    Decontaminated,
    Dedup,
    DedupMethod,
    Heuristics,
)
from marin.experiment.datakit.inputs import document_source
from marin.experiment.datakit.rules import LanguageIdentified, UrlFiltered
from marin.processing.consolidate import (
    ConsolidateConfig,
    DropBlockedUrls,
    DropContaminated,
    DropDuplicates,
    Filter,
    KeepHeuristics,
    KeepLanguages,
    KeepScore,
    RemoveDuplicateSpans,
    consolidate_step,
)

__all__ = ["Consolidated", "Keep", "consolidate", "keep", "keep_languages"]


@dataclass(frozen=True)
class Keep:
    """A rule on a classify step's scores: keep ``score >= min_score``, or the ``top_fraction`` best.

    Attributes:
        scores: the ``classify(...)`` handle.
        min_score: lowest score kept (exclusive with ``top_fraction``).
        top_fraction: share of the documents kept, best scores first.
        key: the attribute holding the score.
    """

    scores: Classified
    min_score: float | None = None
    top_fraction: float | None = None
    key: str = "score"

    def __post_init__(self) -> None:
        if not isinstance(self.scores, Classified):
            raise ValueError(f"keep(...) takes a classify(...) handle, got {_describe(self.scores)}")
        if (self.min_score is None) == (self.top_fraction is None):
            raise ValueError(f"keep({self.scores.name!r}): give exactly one of min_score and top_fraction")
        if self.top_fraction is not None and not 0 < self.top_fraction <= 1:
            raise ValueError(f"keep({self.scores.name!r}): top_fraction must be in (0, 1], got {self.top_fraction}")


def keep(scores: Classified, *, min_score: float | None = None, top_fraction: float | None = None,
         key: str = "score") -> Keep:
    """A consolidate filter keeping documents by score (see :class:`Keep`)."""
    return Keep(scores, min_score=min_score, top_fraction=top_fraction, key=key)


def keep_languages(identified: LanguageIdentified, languages: Iterable[str] | str, *,
                   min_score: float = 0.0) -> KeepLanguages:
    """A consolidate filter keeping documents in ``languages`` identified with ``score >= min_score``.

    Args:
        identified: the ``language_id(...)`` handle.
        languages: the language codes kept (``["en"]``; the model's codes, ISO 639).
        min_score: lowest score kept (FineWeb keeps English at 0.65 of fastText's score).

    Raises:
        ValueError: another kind of handle, no languages, or a score outside [0, 1].
    """
    if not isinstance(identified, LanguageIdentified):
        raise ValueError(f"keep_languages(...) takes a language_id(...) handle, got {_describe(identified)}")
    try:
        return KeepLanguages(identified, tuple([languages] if isinstance(languages, str) else languages),
                             min_score=min_score, name=identified.name)
    except ValueError as e:
        raise ValueError(f"keep_languages({identified.name!r}): {e}") from None


class Consolidated(StepHandle, fn=consolidate_step):
    """Handle to a consolidate step: the kept documents and ``_summary.json`` (counts, examples)."""


def _describe(item: Any) -> str:
    if isinstance(item, StepHandle):
        return f"a {type(item).__name__} handle ({item.name!r})"
    return f"{type(item).__name__}: {item!r}"


def _filter(item: Any) -> tuple[Filter, Any]:
    """The processing filter of ``item``, and the source its sidecars were made from."""
    if isinstance(item, Keep):
        return (KeepScore(item.scores, min_score=item.min_score, top_fraction=item.top_fraction, key=item.key,
                          name=item.scores.name), item.scores.config.input)
    if isinstance(item, Dedup):
        kind = RemoveDuplicateSpans if item.method is DedupMethod.EXACT_PARAGRAPH else DropDuplicates
        return kind(item, name=item.name), item.config.input
    if isinstance(item, Decontaminated):
        return DropContaminated(item, name=item.name), item.config.input
    if isinstance(item, Heuristics):
        return KeepHeuristics(item, name=item.name), item.config.input
    if isinstance(item, UrlFiltered):
        return DropBlockedUrls(item, name=item.name), item.config.input
    if isinstance(item, KeepLanguages) and isinstance(item.attributes, LanguageIdentified):
        return item, item.attributes.config.input
    if isinstance(item, Classified):
        raise ValueError(f"filter {item.name!r}: scores decide nothing alone; give keep(<its classify handle>, "
                         "min_score=...) or keep(..., top_fraction=...) as the filter")
    if isinstance(item, LanguageIdentified):
        raise ValueError(f"filter {item.name!r}: languages decide nothing alone; give keep_languages(<its "
                         "language_id handle>, [\"en\", ...], min_score=...) as the filter")
    if isinstance(item, DropDuplicates | DropContaminated | KeepScore | KeepHeuristics | KeepLanguages
                  | DropBlockedUrls | RemoveDuplicateSpans):
        return item, None
    raise ValueError(f"a consolidate filter is a dedup, decontaminate, heuristics or url_filter handle, "
                     f"keep(classify handle, ...) or keep_languages(language_id handle, ...), got {_describe(item)}")


def consolidate(name: str, source: Any, filters: Iterable[Any], *, max_examples: int = 5,
                version: str = "v1") -> Consolidated:
    """The documents of ``source`` that every filter allows (see the module docstring).

    Args:
        name: the step's name.
        source: the documents the filters' steps were built on (the same handle or path).
        filters: attribute handles, :func:`keep` or :func:`keep_languages` rules, applied in order.
        max_examples: removed documents shown per filter in the summary (and the report).
        version: as for every step.

    Raises:
        ValueError: no filters, a filter of another kind, a filter built on another source, or two
            filters of one step (each named).
    """
    docs = document_source(source)
    chosen = []
    for item in filters:
        spec, made_from = _filter(item)
        if made_from is not None and made_from != docs:
            raise ValueError(f"consolidate {name!r}: filter {spec.name!r} was built on {_source_text(made_from)}, "
                             f"not on the documents consolidated ({_source_text(docs)}); its sidecars would not "
                             "line up with them")
        chosen.append(spec)
    if not chosen:
        raise ValueError(f"consolidate {name!r}: give at least one filter")
    names = [f.name for f in chosen]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"consolidate {name!r}: filter {twice[0]!r} is given twice")
    return Consolidated(name, ConsolidateConfig(input=docs, filters=tuple(chosen), max_examples=max_examples),
                        version=version)


def _source_text(source: Any) -> str:
    if isinstance(source, StepHandle):
        return repr(source.name)
    if isinstance(source, Source):
        return repr(source.spec)
    return repr(source)
