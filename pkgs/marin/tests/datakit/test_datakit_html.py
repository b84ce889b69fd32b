"""html_to_text: real trafilatura and resiliparse on generated pages; bad pages counted, never fatal;
markup without text (heading permalinks, empty table lines) left out."""

from __future__ import annotations

from pathlib import Path

import pytest

from marin.processing.attributes import list_shards, read_documents, read_summary, write_jsonl
from marin.processing.html import Extractor, Favor, HtmlToTextConfig, html_to_text_step, is_permalink
from marin.processing.html_decode import PageProblem, decode_page
from marin.processing.webcorpus import WebCorpusConfig, generate_web_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    out = str(tmp_path_factory.mktemp("webcorpus"))
    truth = generate_web_corpus(out, WebCorpusConfig(num_pages=40, seed=5, num_sites=4, bad_pages_per_kind=1,
                                                     oversized_bytes=60_000, templated_families=1,
                                                     contaminated_pages=3, eval_items=10))
    return out, truth


def _docs(folder: str) -> list[dict]:
    return [d for s in list_shards(folder) for d in read_documents(s.path)]


def _clean(root: str) -> dict[str, str]:
    return {d["id"]: d["text"] for d in _docs(f"{root}/documents")}


@pytest.mark.parametrize("extractor", list(Extractor))
def test_pages_become_their_article_text_and_bad_pages_are_named(corpus: tuple[str, dict], tmp_path: Path,
                                                                 extractor: Extractor) -> None:
    root, truth = corpus
    out = str(tmp_path / "out")
    html_to_text_step(HtmlToTextConfig(input=f"{root}/html", extractor=extractor, max_bytes=50_000), out)
    summary = read_summary(out)
    docs = _docs(out)
    clean = _clean(root)
    # The extractors drop navigation, cookie banners, sidebars and footers: the text is the article.
    assert {d["id"]: d["text"] for d in docs} == clean
    assert summary["pages"] == truth["pages"] == summary["documents"] + summary["skipped"]
    named = {kind: sorted(p["id"] for p in entry["pages"]) for kind, entry in summary["problems"].items()}
    bad = truth["bad_pages"]
    assert named["empty"] == sorted(bad["empty"] + bad["whitespace"])
    assert named["binary"] == bad["binary"] and named["oversized"] == bad["oversized"]
    # A navigation-only page gives either no text or too little of it, by extractor.
    assert named.get("no_text", []) + named.get("too_short", []) == bad["no_text"]
    # Pages in windows-1252 that declare utf-8 are repaired, counted, and kept with their accents.
    assert named["wrong_charset"] == bad["wrong_charset"]
    for page in bad["wrong_charset"]:
        assert "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e" in clean[page]


def test_sharding_follows_input_order(corpus: tuple[str, dict], tmp_path: Path) -> None:
    root, _truth = corpus
    config = {"input": f"{root}/html", "extractor": Extractor.RESILIPARSE, "max_bytes": 50_000}
    html_to_text_step(HtmlToTextConfig(**config, num_shards=1), str(tmp_path / "one"))
    html_to_text_step(HtmlToTextConfig(**config, num_shards=4, compress=False), str(tmp_path / "four"))
    html_to_text_step(HtmlToTextConfig(**config, num_shards=4, compress=False), str(tmp_path / "again"))
    four = list_shards(str(tmp_path / "four"))
    assert [s.name for s in four] == [f"part-{k:05d}.jsonl" for k in range(4)]
    assert _docs(str(tmp_path / "one")) == _docs(str(tmp_path / "four"))
    ids = [d["id"] for d in _docs(str(tmp_path / "four"))]
    assert ids == sorted(ids)  # files are taken in listing order, blocks are contiguous
    for shard in four:
        assert Path(shard.path).read_bytes() == (tmp_path / "again" / shard.name).read_bytes()


def test_page_records_in_json_lines(tmp_path: Path) -> None:
    article = "<html><body><article><h1>Title</h1><p>" + "A sentence about rivers and boats. " * 12 + "</p></article></body></html>"
    records = [
        {"id": "good", "url": "https://example.org/a", "html": article},
        {"id": "blank", "url": "https://example.org/b", "html": "   "},
        {"id": "none", "url": "https://example.org/c", "html": None},
        {"id": "nul", "html": "\x00\x01\x02 binary"},
        {"id": "huge", "html": article * 50},
    ]
    write_jsonl(str(tmp_path / "pages" / "crawl.jsonl.gz"), records)
    html_to_text_step(HtmlToTextConfig(input=str(tmp_path / "pages"), max_bytes=20_000), str(tmp_path / "out"))
    docs = _docs(str(tmp_path / "out"))
    assert [(d["id"], d["url"]) for d in docs] == [("good", "https://example.org/a")]
    assert docs[0]["text"].startswith("Title\nA sentence about rivers and boats.")
    problems = read_summary(str(tmp_path / "out"))["problems"]
    assert {k: [p["id"] for p in v["pages"]] for k, v in problems.items()} == {
        "empty": ["blank", "none"], "binary": ["nul"], "oversized": ["huge"]}


SENTENCE = "The module reads and writes files, and each call comes in a blocking and a promise form. "
# Heading permalinks as three sites write them (Node.js's "#", mkdocs' "¶", an icon-only anchor),
# headings that merely end in "#" or link somewhere else, and a table with an empty row.
MARKED_UP = f"""<!doctype html><html><head><title>File system</title></head><body>
<nav><a href="/">Home</a> <a href="/api">API</a></nav><main><article>
<h1>File system<span><a class="mark" href="#file-system" id="file-system">#</a></span></h1>
<p>{SENTENCE * 2}</p>
<h2 id="install">Install<a class="headerlink" href="#install" title="Permanent link">&para;</a></h2>
<p>{SENTENCE}</p>
<h2 id="usage"><a class="anchor" href="#usage"><svg viewBox="0 0 16 16"><path d="M0 0h16"/></svg></a>Usage</h2>
<p>{SENTENCE}</p>
<h2>Programming in C#</h2>
<p>{SENTENCE}</p>
<h3><a href="#flags">Flags</a> and <a href="other.html">#</a></h3>
<table><tr><th>flag</th><th>meaning</th></tr><tr><td><a href="r.html"><img src="r.png"></a></td><td></td></tr>
<tr><td>r</td><td>open for reading</td></tr><tr><td>w</td><td>open for writing</td></tr></table>
<pre>error: unused
  |         |
  = note: on by default
| ->19.90% (4,000B) main
| |
| ->10.00% (2,000B) other</pre>
<p>{SENTENCE}</p>
</article></main><footer>Copyright</footer></body></html>"""


@pytest.mark.parametrize("extractor", list(Extractor))
def test_heading_permalinks_and_empty_table_lines_are_left_out(tmp_path: Path, extractor: Extractor) -> None:
    (tmp_path / "pages").mkdir()
    (tmp_path / "pages" / "fs.html").write_text(MARKED_UP, encoding="utf-8")
    html_to_text_step(HtmlToTextConfig(input=str(tmp_path / "pages"), extractor=extractor), str(tmp_path / "out"))
    [doc] = _docs(str(tmp_path / "out"))
    lines = doc["text"].splitlines()
    assert lines[0] == "File system" and "Install" in lines and "Usage" in lines and "Programming in C#" in lines
    assert not [line for line in lines if line.endswith(("¶", "system#"))
                or (set(line) <= set("|-: ") and line not in ("|         |", "| |"))]
    assert "Flags and #" in lines  # a mark that links elsewhere is text, not a permalink
    assert any("open for reading" in line for line in lines)
    if extractor is Extractor.TRAFILATURA:
        # Its table rows and the code block stay as they were; the header rule and the empty row go.
        assert lines[lines.index("| flag | meaning |") + 1] == "| r | open for reading |"
    assert "|         |" in lines and "| |" in lines  # drawings in a code block are not tables


def test_what_counts_as_a_permalink() -> None:
    assert is_permalink("#install", "\u00b6") and is_permalink("#a", " # ") and is_permalink("#a", "")
    assert not is_permalink("#usage", "Usage") and not is_permalink("other.html", "#") and not is_permalink(None, "#")


def test_decoding_rules() -> None:
    page = '<html><head><meta charset="iso-8859-1"></head><body>na\u00efve</body></html>'
    # Declares latin-1 but is utf-8: decoded as utf-8, flagged.
    decoded = decode_page(page.encode("utf-8"), 10_000)
    assert decoded.problem is PageProblem.WRONG_CHARSET and "na\u00efve" in (decoded.html or "")
    # Declared correctly: no problem.
    assert decode_page(page.encode("latin-1"), 10_000).problem is None
    assert decode_page(b"\xef\xbb\xbf<p>bom</p>", 100).html == "<p>bom</p>"
    assert decode_page(b"%PDF-1.4 ...", 100).problem is PageProblem.BINARY
    assert decode_page(b"x" * 101, 100).problem is PageProblem.OVERSIZED
    assert decode_page(b" \n ", 100).problem is PageProblem.EMPTY


def test_config_rejects_what_it_cannot_do() -> None:
    with pytest.raises(ValueError, match="favor='precision' is a trafilatura option"):
        HtmlToTextConfig(input="x", extractor=Extractor.RESILIPARSE, favor=Favor.PRECISION)
    with pytest.raises(ValueError, match="max_bytes must be > 0, got 0"):
        HtmlToTextConfig(input="x", max_bytes=0)


def test_a_warc_of_the_pages_gives_their_documents_and_names_what_it_cannot_read(corpus: tuple[str, dict],
                                                                                    tmp_path: Path) -> None:
    from zephyr import WebRecord, write_web_archive

    root, _truth = corpus
    clean = _clean(root)
    pages = sorted(p for p in Path(root, "html").rglob("*.html") if p.relative_to(Path(root, "html")).as_posix() in clean)
    date = "2026-02-03T04:05:06Z"

    def record(i: int, url: str, payload: bytes, **kw) -> WebRecord:
        return WebRecord(**{"id": f"<urn:uuid:00000000-0000-0000-0000-{i:012d}>", "url": url, "date": date,
                            "content_type": "text/html", "charset": None, "payload": payload, **kw})

    records = [record(i, f"https://crawl.test/{p.relative_to(Path(root, 'html')).as_posix()}", p.read_bytes())
               for i, p in enumerate(pages)]
    latin = "<html><body><article><p>" + "Un caf\u00e9 cr\u00e8me au bord de la Loire, pr\u00e8s du pont. " * 8
    records += [record(900, "https://crawl.test/logo.png", b"\x89PNG\r\n\x1a\n", content_type="image/png"),
                record(901, "https://crawl.test/cut.html", b"<html><body><p>cut", problem="truncated"),
                record(902, "https://crawl.test/latin.html", (latin + "</p></article></body></html>").encode("latin-1"),
                       charset="iso-8859-1")]
    write_web_archive(str(tmp_path / "crawl" / "CC-MAIN-0.warc.gz"), records)
    out = str(tmp_path / "out")
    html_to_text_step(HtmlToTextConfig(input=str(tmp_path / "crawl"), extractor=Extractor.RESILIPARSE,
                                       max_bytes=50_000, min_chars=20), out)
    docs = {d["url"]: d for d in _docs(out)}
    for r in records[:len(pages)]:
        assert docs[r.url]["id"] == r.id and docs[r.url]["text"] == clean[r.url.removeprefix("https://crawl.test/")]
    assert "caf\u00e9 cr\u00e8me" in docs["https://crawl.test/latin.html"]["text"]  # the HTTP header's charset
    named = {kind: [p["id"] for p in entry["pages"]] for kind, entry in read_summary(out)["problems"].items()}
    assert named["not_html"] == [records[-3].id] and named["truncated"] == [records[-2].id]
    assert read_summary(out)["pages"] == len(records)


def test_wet_texts_enter_as_documents_without_extraction(tmp_path: Path) -> None:
    from zephyr import WebRecord, write_web_archive

    texts = ["  The ferry left at dawn.  \n\n  It carried forty passengers across the bay.", "short"]
    write_web_archive(str(tmp_path / "wet" / "CC-MAIN-0.warc.wet.gz"), [
        WebRecord(f"<urn:uuid:00000000-0000-0000-0000-00000000000{i}>", f"https://crawl.test/{i}", None, "text/plain",
                  "utf-8", t.encode()) for i, t in enumerate(texts)])
    out = str(tmp_path / "out")
    html_to_text_step(HtmlToTextConfig(input=str(tmp_path / "wet"), min_chars=20), out)
    assert [(d["url"], d["text"]) for d in _docs(out)] == [
        ("https://crawl.test/0", "The ferry left at dawn.\nIt carried forty passengers across the bay.")]
    assert read_summary(out)["problems"]["too_short"]["count"] == 1


def test_a_generated_crawl_plants_languages_personal_data_and_odd_records(corpus: tuple[str, dict],
                                                                           tmp_path: Path) -> None:
    from marin.processing.webcorpus.crawl import FOREIGN_TEXT, CrawlConfig, write_crawl

    root, truth = corpus
    config = CrawlConfig(foreign_pages=1, pii_pages=2, records_per_file=16, seed=3)
    planted = write_crawl(root, str(tmp_path / "crawl"), config)
    again = write_crawl(root, str(tmp_path / "again"), config)
    assert planted == again and all((tmp_path / "crawl" / f).read_bytes() == (tmp_path / "again" / f).read_bytes()
                                    for f in planted["files"])
    assert planted["records"] == truth["pages"] + len(FOREIGN_TEXT) + 2 + 2 and len(planted["files"]) > 1
    out = str(tmp_path / "text")
    html_to_text_step(HtmlToTextConfig(input=str(tmp_path / "crawl"), extractor=Extractor.RESILIPARSE,
                                       max_bytes=50_000, min_chars=50), out)
    docs = {d["id"]: d["text"] for d in _docs(out)}
    for record_id, lang in planted["languages"].items():
        assert any(s.split(",")[0] in docs[record_id] for s in FOREIGN_TEXT[lang]), (lang, docs.get(record_id))
    for record_id, found in planted["pii"].items():
        assert all(value in docs[record_id] for values in found.values() for value in values)
    named = {kind: [p["id"] for p in entry["pages"]] for kind, entry in read_summary(out)["problems"].items()}
    assert named["not_html"] == planted["not_html"] and named["truncated"] == planted["truncated"]
