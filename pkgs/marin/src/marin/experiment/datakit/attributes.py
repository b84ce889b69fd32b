"""Handles for attribute steps: dedup, heuristic rules, a quality classifier and its scores,
decontamination (language identification and URL filters are in :mod:`~marin.experiment.datakit.rules`).
Each writes one sidecar record per document of its source (see :mod:`marin.processing.attributes`);
``consolidate`` turns them into decisions."""

from __future__ import annotations

import enum
import os
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from marin.execution.core.lazy import StepHandle
from marin.execution.core.placeholders import OutputPath, Placeholder
from marin.experiment.datakit.inputs import check_options, document_source, variant
from marin.processing.decontaminate import DecontaminateConfig, EvalSet, decontaminate_step
from marin.processing.dedup import (
    ExactDedupConfig,
    FuzzyDedupConfig,
    Grouping,
    Keep,
    ParagraphDedupConfig,
    exact_dedup_step,
    fuzzy_dedup_step,
    keep_rule,
    paragraph_dedup_step,
)
from marin.processing.quality import (
    C4_RULES,
    DEFAULT_RULES,
    FINEWEB_RULES,
    GOPHER_RULES,
    ClassifyConfig,
    HeuristicRule,
    HeuristicsConfig,
    QualityClassifierConfig,
    classify_step,
    heuristics_step,
    quality_classifier_step,
)

__all__ = [
    "Classified",
    "Decontaminated",
    "Dedup",
    "DedupMethod",
    "ExactDocumentDedup",
    "FuzzyDedup",
    "Heuristics",
    "ParagraphDedup",
    "QualityClassifier",
    "classify",
    "decontaminate",
    "dedup",
    "heuristics",
    "quality_classifier",
]


class DedupMethod(enum.Enum):
    """What a dedup step compares."""

    EXACT_DOCUMENT = "exact_document"
    """Whole documents, equal after normalisation (case, whitespace)."""
    EXACT_PARAGRAPH = "exact_paragraph"
    """Paragraphs (non-blank lines) seen earlier in the corpus."""
    FUZZY = "fuzzy"
    """Near-duplicate documents: Jaccard similarity of word n-gram shingles (MinHash LSH, verified)."""


class Dedup(StepHandle):
    """Handle to a dedup step (one subclass per method)."""

    method: ClassVar[DedupMethod]


class ExactDocumentDedup(Dedup, fn=exact_dedup_step):
    """Exact duplicate documents: ``{duplicate, cluster, representative}`` per document."""

    method = DedupMethod.EXACT_DOCUMENT


class ParagraphDedup(Dedup, fn=paragraph_dedup_step):
    """Duplicate paragraphs: ``{duplicate_spans, duplicate_chars, paragraphs}`` per document."""

    method = DedupMethod.EXACT_PARAGRAPH


class FuzzyDedup(Dedup, fn=fuzzy_dedup_step):
    """Near-duplicate documents: ``{duplicate, cluster, representative, jaccard}`` per document."""

    method = DedupMethod.FUZZY


def dedup(name: str, source: Any, method: DedupMethod | str = DedupMethod.FUZZY, threshold: float | None = None, *,
          ngram: int | None = None, num_perm: int = 128, seed: int = 0, min_chars: int | None = None,
          grouping: Grouping | str = Grouping.IN_PROCESS, keep: Any = "first", version: str = "v1") -> Dedup:
    """Duplicates in ``source``, as attributes.

    Fuzzy only: ``num_perm`` and ``seed`` are the MinHash permutations and their seed.

    ``keep`` chooses each group's representative, the document not marked duplicate
    (:mod:`marin.processing.dedup.keep`): ``"first"`` (the default: the first in source order,
    files as listed, then lines), ``"longest"`` (the longest text), a list of id patterns in order
    of priority (``["docs/*", "*-mirror/*"]``: the id matching the earliest pattern; ids matching
    none come last), or a module-level function of the document record whose greatest value wins.
    Ties go to the first in source order. Only a rule other than ``"first"`` changes the step's hash.

    Args:
        name: the step's name.
        source: documents (a handle, Hugging Face id, or path or glob of JSON lines with ``id``, ``text``).
        method: ``"exact_document"``, ``"exact_paragraph"`` or ``"fuzzy"`` (:class:`DedupMethod`).
        threshold: fuzzy only: near-duplicates have Jaccard similarity ``>=`` this (default 0.8).
        ngram: fuzzy only: words per shingle (default 5).
        min_chars: exact_paragraph only: shorter paragraphs are never duplicates (default 0).
        grouping: where records are grouped (``"in_process"``, ``"zephyr"`` or
            ``"zephyr_workers"``: :class:`Grouping`; not hashed: the same attributes either way).
        keep: exact_document and fuzzy: the representative of each group (above; default ``"first"``).
        version: as for every step.

    Raises:
        ValueError: a bad source or method, an option of another method, or a bad value (named).
    """
    chosen = variant(DedupMethod, method, "method")
    where = variant(Grouping, grouping, "grouping")
    docs = document_source(source)
    given = {"threshold": threshold, "ngram": ngram, "min_chars": min_chars}
    own = {DedupMethod.FUZZY: ("threshold", "ngram"), DedupMethod.EXACT_PARAGRAPH: ("min_chars",),
           DedupMethod.EXACT_DOCUMENT: ()}[chosen]
    for option, value in given.items():
        if value is not None and option not in own:
            raise ValueError(f"dedup {name!r}: {option}={value!r} is not an option of method={chosen.value!r}")
    rule = keep_rule(keep, f"dedup {name!r}: keep")
    if chosen is DedupMethod.FUZZY:
        return FuzzyDedup(name, FuzzyDedupConfig(
            input=docs, threshold=0.8 if threshold is None else threshold, ngram=5 if ngram is None else ngram,
            num_perm=num_perm, seed=seed, grouping=where, keep=rule), version=version)
    if chosen is DedupMethod.EXACT_PARAGRAPH:
        if rule is not Keep.FIRST:
            raise ValueError(f"dedup {name!r}: keep={keep!r} is not an option of method='exact_paragraph' (a "
                             "repeated paragraph is marked in every document after the first)")
        return ParagraphDedup(name, ParagraphDedupConfig(input=docs, min_chars=min_chars or 0, grouping=where),
                              version=version)
    return ExactDocumentDedup(name, ExactDedupConfig(input=docs, grouping=where, keep=rule), version=version)


class Heuristics(StepHandle, fn=heuristics_step):
    """Gopher, C4 and FineWeb rules: ``{passed, failed, metrics}`` per document."""


_FAMILIES = {"gopher": GOPHER_RULES, "c4": C4_RULES, "fineweb": FINEWEB_RULES}


def _rules(rules: Iterable[HeuristicRule | str] | str | None) -> tuple[HeuristicRule, ...]:
    if rules is None:
        return DEFAULT_RULES
    chosen: list[HeuristicRule] = []
    for rule in [rules] if isinstance(rules, str | HeuristicRule) else rules:
        if isinstance(rule, str) and rule in _FAMILIES:
            chosen.extend(_FAMILIES[rule])
        elif isinstance(rule, HeuristicRule) or rule in {r.value for r in HeuristicRule}:
            chosen.append(HeuristicRule(rule))
        else:
            names = ", ".join(repr(n) for n in [*_FAMILIES, *(r.value for r in HeuristicRule)])
            raise ValueError(f"rule must be one of {names} (a family or a rule), got {rule!r}")
    return tuple(dict.fromkeys(chosen))


def heuristics(name: str, source: Any, rules: Iterable[HeuristicRule | str] | str | None = None, *,
               version: str = "v1", **thresholds: Any) -> Heuristics:
    """Gopher, C4 and FineWeb heuristic rules over ``source``, as attributes.

    Args:
        name: the step's name.
        source: documents.
        rules: the rules that decide ``passed``: rules (:class:`HeuristicRule` or their names) and
            families (``"gopher"``, ``"c4"``, ``"fineweb"``); None: Gopher's and C4's.
        version: as for every step.
        thresholds: other fields of :class:`~marin.processing.quality.HeuristicsConfig` (``min_words``,
            ``fineweb_max_short_lines``, ...).

    Raises:
        ValueError: a bad source, an unknown rule or option, or a bad threshold (named).
    """
    check_options(thresholds, HeuristicsConfig, "heuristics")
    return Heuristics(name, HeuristicsConfig(input=document_source(source), rules=_rules(rules), **thresholds),
                      version=version)


class QualityClassifier(StepHandle, fn=quality_classifier_step):
    """Handle to a trained fastText quality classifier (``model.bin`` and validation metrics)."""


def quality_classifier(name: str, positive: Any, negative: Any, *, version: str = "v1",
                       **options: Any) -> QualityClassifier:
    """A fastText classifier of ``positive`` (high-quality) against ``negative`` documents.

    ``positive`` and ``negative`` are the documents of each class (handles, Hugging Face ids or paths).

    Args:
        name: the step's name.
        version: as for every step.
        options: other fields of :class:`~marin.processing.quality.QualityClassifierConfig`
            (``epoch``, ``lr``, ``dim``, ``word_ngrams``, ``validation_fraction``, ``seed``, ...).

    Raises:
        ValueError: a bad source, an unknown option or a bad value (named).
    """
    check_options(options, QualityClassifierConfig, "quality_classifier")
    return QualityClassifier(name, QualityClassifierConfig(
        positive=document_source(positive, "positive"), negative=document_source(negative, "negative"), **options),
        version=version)


class Classified(StepHandle, fn=classify_step):
    """Scores of a quality classifier: ``{score}`` (probability of the positive class) per document."""


def classify(name: str, source: Any, classifier: Any, *, version: str = "v1") -> Classified:
    """Score every document of ``source`` with ``classifier``.

    Args:
        name: the step's name.
        source: documents.
        classifier: a :func:`quality_classifier` handle, or a path to its output or a ``.bin`` model.
        version: as for every step.

    Raises:
        ValueError: a bad source, or a classifier that is another kind of step.
    """
    if isinstance(classifier, Placeholder) and not isinstance(classifier, QualityClassifier | OutputPath):
        raise ValueError(f"classify {name!r}: classifier must be a quality_classifier(...) handle or a path to a "
                         f"fastText model, got a {type(classifier).__name__} step")
    model = classifier if isinstance(classifier, Placeholder) else document_source(classifier, "classifier")
    return Classified(name, ClassifyConfig(input=document_source(source), model=model), version=version)


class Decontaminated(StepHandle, fn=decontaminate_step):
    """Overlap with evaluation sets: ``{contaminated, overlap, eval_set, item, ...}`` per document."""


def _eval_name(data: Any, index: int) -> str:
    if isinstance(data, StepHandle):
        return data.name
    if isinstance(data, OutputPath) and isinstance(data.step, StepHandle):
        return f"{data.step.name}/{data.sub_path}" if data.sub_path else data.step.name
    if isinstance(data, str):
        return os.path.basename(data.rstrip("/")).split(".")[0] or f"eval{index}"
    return f"eval{index}"


def _eval_sets(against: Any) -> tuple[EvalSet, ...]:
    if isinstance(against, Mapping):
        pairs = list(against.items())
    elif isinstance(against, str | Placeholder | EvalSet):
        pairs = [(None, against)]
    else:
        pairs = [(None, data) for data in against]
    sets = []
    for index, (label, data) in enumerate(pairs):
        if isinstance(data, EvalSet):
            sets.append(data)
            continue
        source = document_source(data, "an eval set in against")
        sets.append(EvalSet(name=str(label) if label is not None else _eval_name(data, index), path=source))
    return tuple(sets)


def decontaminate(name: str, source: Any, against: Any, ngram: int = 13, threshold: float = 0.5, *,
                  min_item_words: int = 5, source_field: str = "source", version: str = "v1") -> Decontaminated:
    """Documents of ``source`` that contain items of evaluation sets, by word n-gram overlap.

    Args:
        name: the step's name.
        source: training documents.
        against: the eval sets: a list of handles, paths (JSON lines with ``text``, or text files)
            or :class:`~marin.processing.decontaminate.EvalSet`, or a mapping ``{name: data}``.
        ngram: words per n-gram.
        threshold: contaminated when the share of an item's n-grams found is ``>=`` this (and > 0).
        min_item_words: shorter items are not checked.
        source_field: the document field naming its training source (rows of the contamination matrix).
        version: as for every step.

    Raises:
        ValueError: a bad source or eval set, duplicate eval set names, or a bad value (named).
    """
    return Decontaminated(name, DecontaminateConfig(
        input=document_source(source), against=_eval_sets(against), ngram=ngram, threshold=threshold,
        min_item_words=min_item_words, source_field=source_field), version=version)
