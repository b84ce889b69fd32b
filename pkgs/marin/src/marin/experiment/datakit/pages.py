"""Handles for where documents come from: the generated web corpus, and text extracted from HTML."""

from __future__ import annotations

from typing import Any

from marin.execution.core.lazy import StepHandle
from marin.execution.core.placeholders import OutputPath, Placeholder, output_path_of
from marin.experiment.datakit.inputs import check_options, document_source, variant
from marin.processing.html import Extractor, Favor, HtmlToTextConfig, html_to_text_step
from marin.processing.webcorpus import (
    DOCUMENTS_FOLDER,
    EVAL_ITEMS_FILE,
    HTML_FOLDER,
    NEGATIVE_FILE,
    POSITIVE_FILE,
    TRUTH_FILE,
    WebCorpusConfig,
    web_corpus_step,
)
from marin.processing.webcorpus.crawl import CRAWL_TRUTH_FILE, CrawlConfig, CrawlStepConfig, web_crawl_step

__all__ = ["HtmlText", "WebCorpus", "WebCrawl", "html_to_text", "web_corpus", "web_crawl"]


class WebCorpus(StepHandle, fn=web_corpus_step):
    """Handle to a generated web-like corpus (:mod:`marin.processing.webcorpus`); its parts are
    placeholders for other steps' configs."""

    @property
    def html(self) -> OutputPath:
        """The pages: ``.html`` files, ids their paths below this folder."""
        return output_path_of(self, HTML_FOLDER)

    @property
    def documents(self) -> OutputPath:
        """The clean text of every page that has one (what a perfect extractor gives)."""
        return output_path_of(self, DOCUMENTS_FOLDER)

    @property
    def eval_items(self) -> OutputPath:
        """The evaluation set some pages quote (JSON lines ``{id, question, answer, text}``)."""
        return output_path_of(self, EVAL_ITEMS_FILE)

    @property
    def quality_positive(self) -> OutputPath:
        """Clean articles that are not pages of the corpus (a quality classifier's positives)."""
        return output_path_of(self, POSITIVE_FILE)

    @property
    def quality_negative(self) -> OutputPath:
        """Boilerplate-only pages (a quality classifier's negatives)."""
        return output_path_of(self, NEGATIVE_FILE)

    @property
    def truth(self) -> OutputPath:
        """What was planted: duplicate families and their Jaccard similarities, quotes, bad pages."""
        return output_path_of(self, TRUTH_FILE)


def web_corpus(name: str = "raw/webcorpus", num_pages: int = 1000, seed: int = 0, *, version: str = "v1",
               **options: Any) -> WebCorpus:
    """A generated web-like HTML corpus with planted duplicates, quotes of eval items and bad pages.

    Args:
        name: the step's name.
        num_pages: article pages (duplicates and templated pages included; bad pages on top).
        seed: the seed (the same arguments give byte-identical files).
        version: as for every step.
        options: other fields of :class:`~marin.processing.webcorpus.WebCorpusConfig`.

    Raises:
        ValueError: an unknown option or a bad value (named).
    """
    check_options(options, WebCorpusConfig, "web_corpus")
    return WebCorpus(name, WebCorpusConfig(num_pages=num_pages, seed=seed, **options), version=version)


class WebCrawl(StepHandle, fn=web_crawl_step):
    """Handle to a generated crawl: WARC files of a web corpus's pages with other languages,
    personal data and odd records planted (:mod:`marin.processing.webcorpus.crawl`)."""

    @property
    def truth(self) -> OutputPath:
        """What was planted: each record's language, personal data, the image and truncated records."""
        return output_path_of(self, CRAWL_TRUTH_FILE)


def web_crawl(name: str, corpus: WebCorpus, *, version: str = "v1", **options: Any) -> WebCrawl:
    """The pages of ``corpus`` as a crawl of WARC files (what ``html_to_text`` reads as it reads
    Common Crawl's).

    Args:
        options: fields of :class:`~marin.processing.webcorpus.crawl.CrawlConfig` (``foreign_pages``,
            ``pii_pages``, ``records_per_file``, ``seed``).

    Raises:
        ValueError: an unknown option or a bad value (named).
    """
    if not isinstance(corpus, WebCorpus):
        raise ValueError(f"web_crawl {name!r}: corpus must be a web_corpus(...) handle, got {type(corpus).__name__}")
    check_options(options, CrawlConfig, "web_crawl")
    return WebCrawl(name, CrawlStepConfig(corpus=corpus, crawl=CrawlConfig(**options)), version=version)


class HtmlText(StepHandle, fn=html_to_text_step):
    """Handle to an HTML-to-text step: documents ``{id, text, url}`` and a summary of bad pages."""


def html_to_text(name: str, source: Any, extractor: Extractor | str = Extractor.TRAFILATURA, *,
                 favor: Favor | str = Favor.BALANCED, include_tables: bool = True, include_comments: bool = False,
                 min_chars: int = 200, max_bytes: int = 1_000_000, num_shards: int | None = None,
                 compress: bool = True, html_field: str = "html", version: str = "v1") -> HtmlText:
    """The main text of every page of ``source``.

    ``include_tables`` and ``include_comments`` keep those parts of a page. A source outside the
    store (a path, folder, glob or URL) without ``num_shards`` gives one output shard per input
    file, rebuilt file by file: a later build over a changed file set processes only the new and
    changed files (:mod:`marin.processing.per_file`).

    Args:
        name: the step's name.
        source: ``.html`` files (a folder or glob; a page's id is its path below the glob's fixed
            part) or JSON-lines records ``{id, url, html}``; a handle, path or Hugging Face id.
        extractor: ``"trafilatura"`` or ``"resiliparse"`` (:class:`~marin.processing.html.Extractor`).
        favor: trafilatura's ``"balanced"``, ``"precision"`` or ``"recall"``.
        min_chars: pages with less text are dropped (counted ``too_short``).
        max_bytes: larger pages are not parsed (counted ``oversized``).
        num_shards: output shards, pages cut into blocks by position (None: one per input file
            for a source outside the store, else one per 5,000 pages).
        compress: write ``.jsonl.gz``.
        html_field: the field holding the page in JSON-lines input.
        version: as for every step.

    Raises:
        ValueError: a bad source, extractor or favor (named), or a bad number.
    """
    pages = document_source(source)
    return HtmlText(name, HtmlToTextConfig(
        input=pages, extractor=variant(Extractor, extractor, "extractor"),
        favor=variant(Favor, favor, "favor"), include_tables=include_tables, include_comments=include_comments,
        min_chars=min_chars, max_bytes=max_bytes, num_shards=num_shards, compress=compress,
        html_field=html_field, per_file=num_shards is None and not isinstance(pages, Placeholder)), version=version)
