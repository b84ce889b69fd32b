"""HTML to text: crawled pages in, documents ``{id, text, url}`` out, every bad page counted and named.

Input: ``.html``/``.htm`` files (a page's id is its path below the folder or the glob's fixed
part; its url is None), JSON-lines records ``{id, url, html}``, or web archives
(:mod:`zephyr.warc`): a WARC's response records (id: the ``WARC-Record-ID``, url: the target URI;
decoded with the charset their HTTP headers declare), a WET's conversion records (their plain text
taken as it is, tidied, never extracted), or a mix. Web archives add the problems ``truncated``,
``bad_gzip``, ``bad_record`` and ``not_html``: counted and named like the others, never fatal. Pages are taken in
input order (files as listed, then lines). Two layouts:

* blocks (the default): page ``i`` of ``n`` goes to output shard ``part-<k>`` with
  ``k = i * num_shards // n``: contiguous blocks, decided by input order alone;
* ``per_file`` (what the ``html_to_text`` handle picks for a source outside the store): one
  output shard per input file, named after it (``a/b.html`` and ``a/b.jsonl`` give
  ``a/b.jsonl.gz``), made file by file (:mod:`marin.processing.per_file`), so that a later build
  over a changed file set processes only new and changed files and copies the rest.

Each page is decoded (:mod:`marin.processing.html_decode`), its main text extracted by
trafilatura or resiliparse, and tidied to one paragraph per line (lines stripped, blank lines
dropped). Two kinds of markup that carry no text are left out: a heading's permalink (a link
into the page that shows only a mark, ``File system#`` or ``Install¶``; see :func:`is_permalink`),
taken out of the page before extraction, and a line of a table trafilatura writes that holds no
text (a row of empty cells, ``|  |  |``, or the rule ``|---|---|`` under a header row), dropped after. A
page without text, or with less than ``min_chars`` characters of it, is counted (``no_text``,
``too_short``) like an empty, oversized, binary or undecodable one: never fatal.

Summary (``_summary.json``): ``pages``, ``documents``, ``skipped`` (pages with no document),
and ``problems``: ``{kind: {"count": n, "pages": [{"id", "detail"}, ...]}}`` (the first
``MAX_NAMED`` of each kind named); ``wrong_charset`` pages are repaired and kept, so
``pages == documents + skipped``.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from marin.execution.core.traits import StepTraits, step_function
from marin.processing.attributes import (
    DOCUMENT_SUFFIXES,
    Shard,
    list_files,
    read_records,
    write_jsonl,
    write_summary,
)
from marin.processing.html_decode import Decoded, PageProblem, check_text, decode_page
from marin.processing.incremental import IncrementalStart
from marin.processing.per_file import InputFile, Part, PartOutput, input_files, map_files
from rigging import filesystem as fs
from rigging.fields import added_field
from zephyr import DataError
from zephyr.warc import WARC_SUFFIXES, WET_SUFFIXES, is_web_archive, is_wet, read_web_records

__all__ = ["HTML_SUFFIXES", "MAX_NAMED", "PAGE_SUFFIXES", "Extractor", "Favor", "HtmlToTextConfig", "extract_text",
           "html_to_text_step", "is_permalink", "tidy"]

HTML_SUFFIXES = (".html", ".htm")
PAGE_SUFFIXES = HTML_SUFFIXES + WARC_SUFFIXES + WET_SUFFIXES + DOCUMENT_SUFFIXES
"""Every input ``html_to_text`` reads: pages, web archives, JSON-lines page records."""
MAX_NAMED = 1000
_PAGES_PER_SHARD = 5000
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_HEADING_LINKS = ", ".join(f"{heading} a[href^='#']" for heading in _HEADINGS)
# A line of a table without text, as trafilatura writes tables: a row of empty cells (``|  |  |``,
# each cell "| " + text + " |") or the rule under the header row (``|---|---|``). Not any line of
# bars: a code block's ``| |`` or ``|         |`` (a profiler's or compiler's drawing) is kept.
_EMPTY_TABLE_LINE = re.compile(r"\|(?:  \|)+|\|(?:---\|)+")


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
    per_file: bool = added_field(default=False)
    """One output shard per input file, named after it, made file by file: a later build over a
    changed file set processes only the new and changed files (exclusive with ``num_shards``)."""

    def __post_init__(self) -> None:
        if self.min_chars < 0:
            raise ValueError(f"min_chars must be >= 0, got {self.min_chars}")
        if self.max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {self.max_bytes}")
        if self.num_shards is not None and self.num_shards <= 0:
            raise ValueError(f"num_shards must be > 0 or None, got {self.num_shards}")
        if self.per_file and self.num_shards is not None:
            raise ValueError(f"num_shards={self.num_shards} cuts pages into blocks by position; per_file keeps one "
                             "output shard per input file: give one of them")
        if self.extractor is Extractor.RESILIPARSE and self.favor is not Favor.BALANCED:
            raise ValueError(f"favor={self.favor.value!r} is a trafilatura option; resiliparse has no such setting")


def is_permalink(href: str | None, text: str) -> bool:
    """Whether a link inside a heading is the heading's permalink: it points into the page
    (``#...``) and shows no word, only a mark (``¶``, ``#``, ``§``, an icon) or nothing."""
    return bool(href) and str(href).startswith("#") and not any(ch.isalnum() for ch in text)


def _trafilatura_text(html: str, config: HtmlToTextConfig, url: str | None) -> str | None:
    import trafilatura  # heavy (lxml, justext, courlan): loaded by the step, not at import
    from trafilatura.utils import load_html

    tree = load_html(html)  # the tree trafilatura.extract would make of the page
    if tree is None:
        return None
    for heading in list(tree.iter(*_HEADINGS)):
        for link in [a for a in heading.iter("a") if is_permalink(a.get("href"), a.text_content())]:
            link.drop_tree()  # its tail (the text after it) stays
    # deduplicate=False: trafilatura's cache across calls would make a page's text depend on
    # the pages before it.
    return trafilatura.extract(
        tree, url=url, favor_precision=config.favor is Favor.PRECISION, favor_recall=config.favor is Favor.RECALL,
        include_tables=config.include_tables, include_comments=config.include_comments, deduplicate=False,
        output_format="txt", with_metadata=False)


def _resiliparse_text(html: str, config: HtmlToTextConfig) -> str:
    # Compiled modules, loaded on need.
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    tree = HTMLTree.parse(html)
    if tree.body is not None:
        for link in tree.body.query_selector_all(_HEADING_LINKS):
            if is_permalink(link.getattr("href"), link.text):
                link.decompose()
    return extract_plain_text(tree, preserve_formatting=True, main_content=True, list_bullets=True, alt_texts=False,
                              links=False, comments=config.include_comments,
                              skip_elements=None if config.include_tables else ["table"])


def extract_text(html: str, config: HtmlToTextConfig, url: str | None = None) -> str:
    """The main text of ``html``, one paragraph per line ("" when there is none), without heading
    permalinks and table lines that hold no text (see the module docstring)."""
    if config.extractor is Extractor.RESILIPARSE:
        # resiliparse sets a table's cells apart by tabs, not bars: no table line to drop.
        return tidy(_resiliparse_text(html, config))
    text = tidy(_trafilatura_text(html, config, url) or "")
    return "\n".join(line for line in text.splitlines() if not _EMPTY_TABLE_LINE.fullmatch(line))


def tidy(text: str) -> str:
    """One paragraph per line: lines stripped, blank lines dropped."""
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


_HTML_TYPES = ("text/html", "application/xhtml+xml")


def _archive_pages(path: str, config: HtmlToTextConfig) -> Iterator[tuple[Any, str | None, Decoded]]:
    """The pages of a web archive: a WARC's responses (HTML decoded with the charset their headers
    declare; other content types are ``not_html``), a WET's texts (plain, taken as they are)."""
    wet = is_wet(path)
    for record in read_web_records(path):
        if record.problem is not None:
            yield record.id, record.url, Decoded(None, PageProblem(record.problem), record.detail)
        elif wet:
            decoded = check_text(record.payload.decode("utf-8", errors="replace"), config.max_bytes)
            yield record.id, record.url, Decoded(decoded.html, decoded.problem, decoded.detail, plain=True)
        elif record.content_type is not None and record.content_type not in _HTML_TYPES:
            yield record.id, record.url, Decoded(None, PageProblem.NOT_HTML, record.content_type)
        else:
            yield record.id, record.url, decode_page(record.payload, config.max_bytes, record.charset)


def _pages(shards: list[Shard], config: HtmlToTextConfig) -> Iterator[tuple[Any, str | None, Decoded]]:
    """``(id, url, decoded page)`` in input order."""
    for shard in shards:
        if is_web_archive(shard.path):
            yield from _archive_pages(shard.path, config)
            continue
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
    return sum(1 if s.path.lower().endswith(HTML_SUFFIXES)
               else sum(1 for _ in read_web_records(s.path)) if is_web_archive(s.path)
               else sum(1 for _ in read_records(s.path)) for s in shards)


def _note(problems: dict[str, dict[str, Any]], page_id: Any, problem: PageProblem, detail: str) -> None:
    entry = problems.setdefault(problem.value, {"count": 0, "pages": []})
    entry["count"] += 1
    if len(entry["pages"]) < MAX_NAMED:
        entry["pages"].append({"id": page_id, "detail": detail})


def _document(page: tuple[Any, str | None, Decoded], config: HtmlToTextConfig,
              problems: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The document of one page, or None (its problem noted in ``problems``)."""
    page_id, url, decoded = page
    if decoded.problem is not None:
        _note(problems, page_id, decoded.problem, decoded.detail)
    if decoded.html is None:
        return None
    text = tidy(decoded.html) if decoded.plain else extract_text(decoded.html, config, url)
    if not text:
        _note(problems, page_id, PageProblem.NO_TEXT, "the extractor found no main text")
    elif len(text) < config.min_chars:
        _note(problems, page_id, PageProblem.TOO_SHORT, f"{len(text)} characters < {config.min_chars}")
    else:
        return {"id": page_id, "text": text, "url": url}
    return None


def _merged(problems: Sequence[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Problems of parts, in input order, as one scan of all pages would have counted them."""
    out: dict[str, dict[str, Any]] = {}
    for found in problems:
        for kind, entry in found.items():
            into = out.setdefault(kind, {"count": 0, "pages": []})
            into["count"] += entry["count"]
            into["pages"].extend(entry["pages"][:MAX_NAMED - len(into["pages"])])
    return dict(sorted(out.items()))


def _write_summary(output_path: str, config: HtmlToTextConfig, pages: int, documents: int, shards: int,
                   problems: dict[str, dict[str, Any]]) -> None:
    repaired = problems.get(PageProblem.WRONG_CHARSET.value, {}).get("count", 0)
    write_summary(output_path, {
        "step": "html_to_text", "extractor": config.extractor.value, "pages": pages, "documents": documents,
        "skipped": sum(p["count"] for p in problems.values()) - repaired, "shards": shards,
        "problems": dict(sorted(problems.items())),
    })


def _output_name(name: str, extension: str) -> str:
    """An input file's output shard: its name with its suffix replaced (``a/b.html`` -> ``a/b.jsonl.gz``)."""
    lowered = name.lower()
    suffix = next(s for s in sorted(PAGE_SUFFIXES, key=len, reverse=True) if lowered.endswith(s))
    return f"{name[:len(name) - len(suffix)]}.{extension}"


def _by_file(config: HtmlToTextConfig, output_path: str, extension: str) -> None:
    """The ``per_file`` layout: one output shard per input file, made file by file."""
    files = input_files(config.input, PAGE_SUFFIXES)
    named: dict[str, str] = {}
    for f in files:
        other = named.setdefault(_output_name(f.name, extension), f.name)
        if other != f.name:
            raise ValueError(f"input files {other!r} and {f.name!r} would share the output shard "
                             f"{_output_name(f.name, extension)!r}; rename one, or give num_shards")

    def one(f: InputFile) -> PartOutput:
        problems: dict[str, dict[str, Any]] = {}
        pages = 0
        docs = []
        for page in _pages([Shard(f.path, f.name)], config):
            pages += 1
            doc = _document(page, config, problems)
            if doc is not None:
                docs.append(doc)
        out = _output_name(f.name, extension)
        write_jsonl(fs.join(output_path, out), docs)
        return PartOutput((out,), {"pages": pages, "documents": len(docs), "problems": problems})

    parts: list[Part] = map_files(files, output_path, one)
    _write_summary(output_path, config, sum(p.stats["pages"] for p in parts),
                   sum(p.stats["documents"] for p in parts), len(parts), _merged([p.stats["problems"] for p in parts]))


@step_function(StepTraits(plan_start=IncrementalStart(("input",))))
def html_to_text_step(config: HtmlToTextConfig, output_path: str) -> None:
    """Step function: extract documents from pages (see the module docstring)."""
    extension = "jsonl.gz" if config.compress else "jsonl"
    if config.per_file:
        _by_file(config, output_path, extension)
        return
    shards = list_files(config.input, PAGE_SUFFIXES)
    total = _count(shards)
    num_shards = config.num_shards or max(1, math.ceil(total / _PAGES_PER_SHARD))
    problems: dict[str, dict[str, Any]] = {}
    documents = 0
    current, batch = 0, []

    def flush(shard: int, rows: list[dict]) -> None:
        write_jsonl(fs.join(output_path, f"part-{shard:05d}.{extension}"), rows)

    for index, page in enumerate(_pages(shards, config)):
        shard = index * num_shards // max(total, 1)
        while current < shard:
            flush(current, batch)
            current, batch = current + 1, []
        doc = _document(page, config, problems)
        if doc is not None:
            batch.append(doc)
            documents += 1
    while current < num_shards:
        flush(current, batch)
        current, batch = current + 1, []
    _write_summary(output_path, config, total, documents, num_shards, problems)
