"""A generated web-like HTML corpus with planted duplicates, contamination and bad pages (tests,
experiments, benchmarks); see :mod:`marin.processing.webcorpus.generate`."""

from marin.processing.webcorpus.generate import (
    BAD_PAGE_KINDS,
    CONTAMINATION_MODES,
    DOCUMENTS_FOLDER,
    EVAL_ITEMS_FILE,
    HTML_FOLDER,
    NEGATIVE_FILE,
    POSITIVE_FILE,
    TRUTH_FILE,
    WebCorpusConfig,
    generate_web_corpus,
    web_corpus_step,
)

__all__ = ["BAD_PAGE_KINDS", "CONTAMINATION_MODES", "DOCUMENTS_FOLDER", "EVAL_ITEMS_FILE", "HTML_FOLDER", "NEGATIVE_FILE",
           "POSITIVE_FILE", "TRUTH_FILE", "WebCorpusConfig", "generate_web_corpus", "web_corpus_step"]
