"""Data-curation steps as lazy handles: extract, identify languages, apply rules, redact PII,
deduplicate, classify, decontaminate, consolidate.

::

    corpus = web_corpus("raw/webcorpus", num_pages=2000)
    text = html_to_text("datakit/text", corpus.html, extractor="resiliparse")
    language = language_id("datakit/language", text)
    rules = heuristics("datakit/rules", text, rules=["gopher", "c4", "fineweb"])
    fuzzy = dedup("datakit/fuzzy", text, method="fuzzy", threshold=0.8)
    exact = dedup("datakit/exact", text, method="exact_document")
    model = quality_classifier("datakit/quality-model", positive=corpus.quality_positive,
                               negative=corpus.quality_negative)
    scores = classify("datakit/quality", text, model)
    clean = decontaminate("datakit/decontaminated", text, against=[corpus.eval_items])
    kept = consolidate("datakit/kept", text, filters=[keep_languages(language, ["en"], min_score=0.65), rules,
                                                      exact, fuzzy, clean, keep(scores, min_score=0.5)])
    redacted = pii("datakit/redacted", kept)
    tokens = tokenized("tokenized/datakit", source=redacted, tokenizer=marin_tokenizer)

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
from marin.experiment.datakit.consolidate import Consolidated, Keep, consolidate, keep, keep_languages
from marin.experiment.datakit.pages import HtmlText, WebCorpus, WebCrawl, html_to_text, web_corpus, web_crawl
from marin.experiment.datakit.rules import (
    LanguageIdentified,
    Redacted,
    UrlFiltered,
    language_id,
    pii,
    url_filter,
)
from marin.processing.consolidate import KeepLanguages
from marin.processing.decontaminate import EvalSet
from marin.processing.dedup import Grouping
from marin.processing.html import Extractor, Favor
from marin.processing.language import LanguageModel
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
    "KeepLanguages",
    "LanguageIdentified",
    "LanguageModel",
    "ParagraphDedup",
    "QualityClassifier",
    "Redacted",
    "UrlFiltered",
    "WebCorpus",
    "WebCrawl",
    "classify",
    "consolidate",
    "decontaminate",
    "dedup",
    "heuristics",
    "html_to_text",
    "keep",
    "keep_languages",
    "language_id",
    "pii",
    "quality_classifier",
    "url_filter",
    "web_corpus",
    "web_crawl",
]
