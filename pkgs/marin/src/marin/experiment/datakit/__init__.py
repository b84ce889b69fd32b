"""Data-curation steps as lazy handles: extract, deduplicate, classify, decontaminate, consolidate.

::

    corpus = web_corpus("raw/webcorpus", num_pages=2000)
    text = html_to_text("datakit/text", corpus.html, extractor="resiliparse")
    fuzzy = dedup("datakit/fuzzy", text, method="fuzzy", threshold=0.8)
    exact = dedup("datakit/exact", text, method="exact_document")
    model = quality_classifier("datakit/quality-model", positive=corpus.quality_positive,
                               negative=corpus.quality_negative)
    scores = classify("datakit/quality", text, model)
    clean = decontaminate("datakit/decontaminated", text, against=[corpus.eval_items])
    kept = consolidate("datakit/kept", text, filters=[exact, fuzzy, clean, keep(scores, min_score=0.5)])
    tokens = tokenized("tokenized/datakit", source=kept, tokenizer=marin_tokenizer)

A source is a handle, a Hugging Face id, or a path or glob of JSON-lines documents (``id``,
``text``); methods and extractors are typed (:class:`DedupMethod`, :class:`Extractor`) and
strings naming them are accepted; a bad value is refused when the handle is built. The step
functions and file formats are :mod:`marin.processing`'s.
"""

from marin.experiment.datakit.attributes import (
    Classified,
    Decontaminated,
    Dedup,
    DedupMethod,
    ExactDocumentDedup,
    FuzzyDedup,
    Heuristics,
    ParagraphDedup,
    QualityClassifier,
    classify,
    decontaminate,
    dedup,
    heuristics,
    quality_classifier,
)
from marin.experiment.datakit.consolidate import Consolidated, Keep, consolidate, keep
from marin.experiment.datakit.pages import HtmlText, WebCorpus, html_to_text, web_corpus
from marin.processing.decontaminate import EvalSet
from marin.processing.dedup import Grouping
from marin.processing.html import Extractor, Favor
from marin.processing.quality import HeuristicRule

__all__ = [
    "Classified",
    "Consolidated",
    "Decontaminated",
    "Dedup",
    "DedupMethod",
    "EvalSet",
    "ExactDocumentDedup",
    "Extractor",
    "Favor",
    "FuzzyDedup",
    "Grouping",
    "HeuristicRule",
    "Heuristics",
    "HtmlText",
    "Keep",
    "ParagraphDedup",
    "QualityClassifier",
    "WebCorpus",
    "classify",
    "consolidate",
    "decontaminate",
    "dedup",
    "heuristics",
    "html_to_text",
    "keep",
    "quality_classifier",
    "web_corpus",
]
