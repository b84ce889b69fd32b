"""Text from HTML beside the bare extractors: token F1 of each page's text against its reference.

``python -m benchmarks.bench_html [--pages N] [--work DIR]``

Two sets of pages this repository makes:

* its documentation site (``mkdocs build`` into a scratch folder): real pages of mkdocs-material,
  with a permalink mark (``¶``) in every heading and Markdown tables. A page's reference is its
  article element (``article.md-content__inner``) as a reader sees it: the text of its blocks, one
  per line, without the permalink marks and the theme's buttons.
* the generated web corpus (:mod:`marin.processing.webcorpus`, ``--pages`` pages): articles inside a
  site's navigation, banners, sidebar and footer. A page's reference is the generator's clean text
  (``documents/``); bad pages and pages without text are left out.

Each page's text from :func:`marin.processing.html.extract_text` (what ``html_to_text`` writes) and
from the bare extractor (``trafilatura.extract``, resiliparse's ``extract_plain_text``, with the same
options, lines stripped) is scored by token F1 against the reference. Tokens are whitespace-separated,
so a permalink mark glued to a heading's last word (``Install¶``, ``File system#``) or a table rule
(``|---|---|``, ``| | |``) costs precision. Goal: html_to_text's F1 equal or better on every page.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from benchmarks.workfolder import parse_bench_args, work_folder
from marin.processing.attributes import list_shards, read_documents
from marin.processing.html import Extractor, HtmlToTextConfig, extract_text
from marin.processing.webcorpus import DOCUMENTS_FOLDER, HTML_FOLDER, WebCorpusConfig, generate_web_corpus

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PAGES = 300
# Elements whose text ends a line of a page's reference.
_BLOCKS = ("p", "li", "dt", "dd", "tr", "td", "th", "pre", "h1", "h2", "h3", "h4", "h5", "h6", "div",
           "blockquote", "table", "br")
_NOT_TEXT = (".//a[contains(concat(' ', @class, ' '), ' headerlink ')] | .//button | .//script | .//style"
             " | .//*[contains(concat(' ', @class, ' '), ' md-source-file ')]")


def token_f1(text: str, reference: str) -> float:
    """F1 of the whitespace-separated tokens of ``text`` against those of ``reference`` (as bags)."""
    ours, theirs = Counter(text.split()), Counter(reference.split())
    overlap = sum((ours & theirs).values())
    if not overlap:
        return float(ours == theirs)
    precision, recall = overlap / sum(ours.values()), overlap / sum(theirs.values())
    return 2 * precision * recall / (precision + recall)


def article_text(html: str) -> str | None:
    """The reference text of a documentation page (see the module docstring); None for a page with
    no article (the 404 page)."""
    import lxml.html  # trafilatura's parser; only the benchmark reads pages this way

    found = lxml.html.fromstring(html).xpath(
        "//article[contains(concat(' ', @class, ' '), ' md-content__inner ')]")
    if not found:
        return None
    article = found[0]
    for node in article.xpath(_NOT_TEXT):
        node.drop_tree()
    for node in article.iter(*_BLOCKS):
        node.tail = "\n" + (node.tail or "")
    return article.text_content()


def docs_site_pages(work: Path) -> dict[str, tuple[str, str]]:
    """``{page: (html, reference)}`` of the documentation site, built into ``work``."""
    from mkdocs.commands.build import build  # the site's builder: only this set of pages needs it
    from mkdocs.config import load_config

    site = work / "site"
    logging.getLogger("mkdocs").setLevel(logging.ERROR)
    build(load_config(str(ROOT / "mkdocs.yml"), site_dir=str(site)))
    pages = {}
    for page in sorted(site.rglob("*.html")):
        html = page.read_text(encoding="utf-8")
        reference = article_text(html)
        if reference and reference.strip():
            pages[page.relative_to(site).as_posix()] = (html, reference)
    return pages


def web_corpus_pages(work: Path, count: int) -> dict[str, tuple[str, str]]:
    """``{page id: (html, clean text)}`` of a generated web corpus of ``count`` pages."""
    folder = work / "webcorpus"
    truth = generate_web_corpus(str(folder), WebCorpusConfig(num_pages=count, seed=0, bad_pages_per_kind=0))
    clean = {d["id"]: d["text"] for s in list_shards(str(folder / DOCUMENTS_FOLDER)) for d in read_documents(s.path)}
    bad = {page for pages in truth["bad_pages"].values() for page in pages}
    return {page: ((folder / HTML_FOLDER / page).read_text(encoding="utf-8"), text)
            for page, text in sorted(clean.items()) if page not in bad}


def bare_extractor(extractor: Extractor) -> Callable[[str], str]:
    """The extractor html_to_text wraps, called as it calls it, its lines stripped and blank lines dropped."""
    if extractor is Extractor.TRAFILATURA:
        import trafilatura  # heavy (lxml, justext): only for this measurement

        def extract(html: str) -> str:
            return trafilatura.extract(html, deduplicate=False, output_format="txt", with_metadata=False,
                                       include_tables=True, include_comments=False) or ""
    else:
        from resiliparse.extract.html2text import extract_plain_text  # compiled module, loaded on need

        def extract(html: str) -> str:
            return extract_plain_text(html, preserve_formatting=True, main_content=True, list_bullets=True,
                                      alt_texts=False, links=False, comments=False)

    return lambda html: "\n".join(line.strip() for line in extract(html).splitlines() if line.strip())


def compare(pages: dict[str, tuple[str, str]], extractor: Extractor) -> dict[str, float | int]:
    """Mean token F1 of the bare extractor and of html_to_text over ``pages``, and on how many pages
    html_to_text is better, equal and worse."""
    bare = bare_extractor(extractor)
    config = HtmlToTextConfig(input="-", extractor=extractor)
    row: dict[str, float | int] = {"pages": len(pages), "bare": 0.0, "ours": 0.0, "better": 0, "equal": 0, "worse": 0}
    started = time.process_time()
    for html, reference in pages.values():
        theirs, ours = token_f1(bare(html), reference), token_f1(extract_text(html, config), reference)
        row["bare"] += theirs / len(pages)
        row["ours"] += ours / len(pages)
        row["better" if ours > theirs else "equal" if ours == theirs else "worse"] += 1
    row["cpu_s"] = time.process_time() - started
    return row


def run(count: int, work: Path) -> list[tuple[str, str, dict[str, float | int]]]:
    sets = {"documentation site (mkdocs-material)": docs_site_pages(work),
            f"generated web corpus ({count} pages)": web_corpus_pages(work, count)}
    rows = [(name, extractor.value, compare(pages, extractor)) for name, pages in sets.items() for extractor in Extractor]
    print("\nText from HTML: token F1 against each page's reference (mean over pages), html_to_text beside "
          "the bare extractor")
    print(f"{'pages':<40}{'extractor':<13}{'n':>5}{'bare':>8}{'ours':>8}{'better':>8}{'equal':>7}{'worse':>7}"
          f"{'CPU s':>7}")
    for name, extractor, row in rows:
        print(f"{name:<40}{extractor:<13}{row['pages']:>5}{row['bare']:>8.4f}{row['ours']:>8.4f}"
              f"{row['better']:>8}{row['equal']:>7}{row['worse']:>7}{row['cpu_s']:>7.1f}")
    worse = sum(int(row["worse"]) for _name, _extractor, row in rows)
    print(f"pages where html_to_text scores below the bare extractor: {worse} (goal 0)")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=DEFAULT_PAGES, help="pages of the generated web corpus")
    parser.add_argument("--work", help="scratch folder (default: a temporary one, removed after)")
    args = parse_bench_args(parser, argv)
    with work_folder(args.work, "bench-html-") as work:
        run(args.pages, Path(work))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
