"""HTML to text: crawled pages in, documents ``{id, text, url}`` out, every bad page counted and named.

Input: ``.html``/``.htm`` files (a page's id is its path below the folder or the glob's fixed
part; its url is None) or JSON-lines records ``{id, url, html}`` (or a mix). Pages are taken in
input order (files as listed, then lines) and page ``i`` of ``n`` goes to output shard
``i * num_shards // n``: contiguous blocks, decided by input order alone.

Each page is decoded (:mod:`marin.processing.html_decode`), its main text extracted by
trafilatura or resiliparse, and tidied to one paragraph per line (lines stripped, blank lines
dropped). A page without text, or with less than ``min_chars`` characters of it, is counted
(``no_text``, ``too_short``) like an empty, oversized, binary or undecodable one: never fatal.

Summary (``_summary.json``): ``pages``, ``documents``, ``skipped`` (pages with no document),
and ``problems``: ``{kind: {"count": n, "pages": [{"id", "detail"}, ...]}}`` (the first
``MAX_NAMED`` of each kind named); ``wrong_charset`` pages are repaired and kept, so
``pages == documents + skipped``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from marin.processing.attributes import (
    DOCUMENT_SUFFIXES,
    Shard,
    list_files,
    read_records,
    write_jsonl,
    write_summary,
)
from marin.processing.html_decode import Decoded, PageProblem, check_text, decode_page
from rigging import filesystem as fs
from zephyr import DataError

__all__ = ["HTML_SUFFIXES", "MAX_NAMED", "Extractor", "Favor", "HtmlToTextConfig", "extract_text", "html_to_text_step"]

HTML_SUFFIXES = (".html", ".htm")
MAX_NAMED = 1000
_PAGES_PER_SHARD = 5000


class Extractor(enum.Enum):
    """Which library finds the main text of a page."""

    TRAFILATURA = "trafilatura"
    RESILIPARSE = "resiliparse"


class Favor(enum.Enum):
    """Trafilatura's trade-off between keeping too little and too much."""

    BALANCED = "balanced"
    PRECISION = "precision"
    RECALL = "recall"


@dataclass(frozen=True)
class HtmlToTextConfig:
    """Pages to documents."""

    input: Any
    """``.html`` files or JSON-lines page records (folder, glob, list, or a step/handle output)."""
    extractor: Extractor = Extractor.TRAFILATURA
    """Main-text extractor."""
    favor: Favor = Favor.BALANCED
    """Precision/recall trade-off (trafilatura only)."""
    include_tables: bool = True
    """Keep the text of tables."""
    include_comments: bool = False
    """Keep comment sections."""
    min_chars: int = 200
    """Pages with less extracted text than this are counted ``too_short`` and dropped."""
    max_bytes: int = 1_000_000
    """Pages larger than this are counted ``oversized`` and not parsed."""
    num_shards: int | None = None
    """Output shards (None: one per 5,000 pages)."""
    compress: bool = True
    """Write ``.jsonl.gz`` (else ``.jsonl``)."""
    html_field: str = "html"
    """Field holding the page in JSON-lines input."""

    def __post_init__(self) -> None:
        if self.min_chars < 0:
            raise ValueError(f"min_chars must be >= 0, got {self.min_chars}")
        if self.max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {self.max_bytes}")
        if self.num_shards is not None and self.num_shards <= 0:
            raise ValueError(f"num_shards must be > 0 or None, got {self.num_shards}")
        if self.extractor is Extractor.RESILIPARSE and self.favor is not Favor.BALANCED:
            raise ValueError(f"favor={self.favor.value!r} is a trafilatura option; resiliparse has no such setting")


def extract_text(html: str, config: HtmlToTextConfig, url: str | None = None) -> str:
    """The main text of ``html``, one paragraph per line ("" when there is none)."""
    if config.extractor is Extractor.TRAFILATURA:
        import trafilatura  # heavy (lxml, justext, courlan): loaded by the step, not at import

        # deduplicate=False: trafilatura's cache across calls would make a page's text depend on
        # the pages before it.
        text = trafilatura.extract(
            html, url=url, favor_precision=config.favor is Favor.PRECISION,
            favor_recall=config.favor is Favor.RECALL, include_tables=config.include_tables,
            include_comments=config.include_comments, deduplicate=False, output_format="txt",
            with_metadata=False)
    else:
        from resiliparse.extract.html2text import extract_plain_text  # compiled module, loaded on need

        text = extract_plain_text(html, preserve_formatting=True, main_content=True, list_bullets=True,
                                  alt_texts=False, links=False, comments=config.include_comments,
                                  skip_elements=None if config.include_tables else ["table"])
    return "\n".join(line.strip() for line in (text or "").splitlines() if line.strip())


def _pages(shards: list[Shard], config: HtmlToTextConfig) -> Iterator[tuple[Any, str | None, Decoded]]:
    """``(id, url, decoded page)`` in input order."""
    for shard in shards:
        if shard.path.lower().endswith(HTML_SUFFIXES):
            size = fs.size(shard.path)
            if size > config.max_bytes:
                yield shard.name, None, Decoded(None, PageProblem.OVERSIZED, f"{size} bytes > {config.max_bytes}")
            else:
                yield shard.name, None, decode_page(fs.read_bytes(shard.path), config.max_bytes)
            continue
        for number, record in enumerate(read_records(shard.path), 1):
            page_id = record.get("id")
            if isinstance(page_id, bool) or not isinstance(page_id, str | int):
                raise DataError(shard.path, f"line {number}", f"a page record needs an 'id', got {page_id!r}")
            html = record.get(config.html_field)
            url = record.get("url") if isinstance(record.get("url"), str) else None
            if html is None:
                yield page_id, url, Decoded(None, PageProblem.EMPTY, f"no {config.html_field!r} field")
            elif not isinstance(html, str):
                yield page_id, url, Decoded(None, PageProblem.BINARY, f"{config.html_field!r} is {type(html).__name__}")
            else:
                yield page_id, url, check_text(html, config.max_bytes)


def _count(shards: list[Shard]) -> int:
    # Output shards are cut by page index, so the total is needed first (JSON lines are read twice).
    return sum(1 if s.path.lower().endswith(HTML_SUFFIXES) else sum(1 for _ in read_records(s.path)) for s in shards)


def html_to_text_step(config: HtmlToTextConfig, output_path: str) -> None:
    """Step function: extract documents from pages (see the module docstring)."""
    shards = list_files(config.input, HTML_SUFFIXES + DOCUMENT_SUFFIXES)
    total = _count(shards)
    num_shards = config.num_shards or max(1, math.ceil(total / _PAGES_PER_SHARD))
    extension = "jsonl.gz" if config.compress else "jsonl"
    problems: dict[str, dict[str, Any]] = {}
    documents = 0
    current, batch = 0, []

    def flush(shard: int, rows: list[dict]) -> None:
        write_jsonl(fs.join(output_path, f"part-{shard:05d}.{extension}"), rows)

    def note(page_id: Any, problem: PageProblem, detail: str) -> None:
        entry = problems.setdefault(problem.value, {"count": 0, "pages": []})
        entry["count"] += 1
        if len(entry["pages"]) < MAX_NAMED:
            entry["pages"].append({"id": page_id, "detail": detail})

    for index, (page_id, url, decoded) in enumerate(_pages(shards, config)):
        shard = index * num_shards // max(total, 1)
        while current < shard:
            flush(current, batch)
            current, batch = current + 1, []
        if decoded.problem is not None:
            note(page_id, decoded.problem, decoded.detail)
        if decoded.html is None:
            continue
        text = extract_text(decoded.html, config, url)
        if not text:
            note(page_id, PageProblem.NO_TEXT, "the extractor found no main text")
        elif len(text) < config.min_chars:
            note(page_id, PageProblem.TOO_SHORT, f"{len(text)} characters < {config.min_chars}")
        else:
            batch.append({"id": page_id, "text": text, "url": url})
            documents += 1
    while current < num_shards:
        flush(current, batch)
        current, batch = current + 1, []
    repaired = problems.get(PageProblem.WRONG_CHARSET.value, {}).get("count", 0)
    write_summary(output_path, {
        "step": "html_to_text", "extractor": config.extractor.value, "pages": total, "documents": documents,
        "skipped": sum(p["count"] for p in problems.values()) - repaired, "shards": num_shards,
        "problems": dict(sorted(problems.items())),
    })
