"""A WARC made from real pages, read by ``html_to_text`` (``python -m benchmarks warc``).

The pages are the HTML documentation installed on this machine (``/usr/share/doc``: manuals and
package guides written by people) and this project's own documentation site. They are written as
the responses of a crawl (one gzip member per record), then
``html_to_text`` reads the WARC as it reads Common Crawl's. Reported: records read, documents
extracted, pages per second, and each document's token F1 against bare ``trafilatura.extract`` of
the same payload (``html_to_text`` drops heading permalinks and empty table rules, so it may
differ from the bare extractor, never by much).
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks.bench_html import ROOT, bare_extractor, token_f1
from marin.processing.attributes import list_shards, read_documents, read_summary
from marin.processing.html import Extractor, HtmlToTextConfig, html_to_text_step
from zephyr import WebRecord, write_web_archive

MAX_PAGES = 400
RECORDS_PER_FILE = 100


def real_pages(site: Path) -> dict[str, bytes]:
    """``{url: page bytes}`` of the installed HTML documentation and the built docs site."""
    found = sorted(p for p in Path("/usr/share/doc").rglob("*") if p.suffix in (".html", ".htm") and p.is_file()
                   and p.stat().st_size > 2000)
    pages = {f"https://doc.example/{p.relative_to('/usr/share/doc').as_posix()}": p.read_bytes()
             for p in found[:MAX_PAGES]}
    if site.is_dir():
        pages.update({f"https://marin.example/{p.relative_to(site).as_posix()}": p.read_bytes()
                      for p in sorted(site.rglob("*.html"))[:MAX_PAGES - len(pages)]})
    return pages


def write_crawl(pages: dict[str, bytes], folder: str) -> int:
    """Write ``pages`` as the responses of a crawl, ``RECORDS_PER_FILE`` to a ``part-<k>.warc.gz``
    under ``folder``, in URL order; the number of records written."""
    # No charset in the HTTP headers: each page's own <meta> tag says it, as on most of the web.
    records = [WebRecord(f"<urn:uuid:{uuid.UUID(int=i, version=4)}>", url, "2026-06-01T00:00:00Z", "text/html",
                         None, payload) for i, (url, payload) in enumerate(sorted(pages.items()))]
    for start in range(0, len(records), RECORDS_PER_FILE):
        write_web_archive(f"{folder}/part-{start // RECORDS_PER_FILE:03d}.warc.gz", records[start:start + RECORDS_PER_FILE])
    return len(records)


def main() -> None:
    pages = real_pages(ROOT / "build" / "site")
    if not pages:
        print("\n== WARC of real pages: no HTML documentation on this machine (/usr/share/doc, build/site); skipped ==")
        return
    with tempfile.TemporaryDirectory(prefix="bench-warc-") as work:
        records = write_crawl(pages, f"{work}/crawl")
        started = time.perf_counter()
        html_to_text_step(HtmlToTextConfig(input=f"{work}/crawl", extractor=Extractor.TRAFILATURA, min_chars=1),
                          f"{work}/text")
        seconds = time.perf_counter() - started
        docs = {d["url"]: d["text"] for s in list_shards(f"{work}/text") for d in read_documents(s.path)}
        bare = bare_extractor(Extractor.TRAFILATURA)
        scores = []
        for url, payload in sorted(pages.items()):
            reference = bare(payload.decode("utf-8", errors="replace"))
            if url in docs and reference:
                scores.append(token_f1(docs[url], reference))
        summary = read_summary(f"{work}/text")
        problems = ", ".join(f"{kind} {entry['count']}" for kind, entry in summary["problems"].items()) or "no problems"
        print(f"\n== a WARC of {records} real pages (installed documentation and this site), through html_to_text ==")
        print(f"records read {summary['pages']}, documents {summary['documents']}, skipped {summary['skipped']} "
              f"({problems})")
        print(f"{records / seconds:.1f} pages/s in this process ({seconds:.1f} s)")
        print(f"token F1 against bare trafilatura.extract of the same payloads: mean {statistics.mean(scores):.4f}, "
              f"median {statistics.median(scores):.4f}, pages equal {sum(s == 1.0 for s in scores)} of {len(scores)}, "
              f"lowest {min(scores):.4f}")


if __name__ == "__main__":
    main()
