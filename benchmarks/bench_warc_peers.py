"""From web archives to English text beside datatrove: WARC -> text -> language, on the same WARC files.

``python -m benchmarks.bench_warc_peers [--pages N] [--foreign N] [--work DIR]`` (``make bench-peers``:
datatrove lives only in ``.venv-bench``), on two crawls, one gzip member per record:

* real pages: the WARC :mod:`benchmarks.bench_warc` writes of the HTML documentation installed on
  this machine and this project's documentation site when built (English, nearly all);
* the tutorial's crawl: the generated web corpus of :mod:`benchmarks.bench_datakit` (``--pages``
  pages) written by :func:`marin.processing.webcorpus.crawl.write_crawl`, which plants ``--foreign``
  pages in each of German, French, Spanish, Italian, Dutch and Portuguese, an image response and a
  truncated record among them.

Each keeps the English pages whose language score clears FineWeb's bar, 0.65 (ours: at least;
datatrove: above):

* ours: the steps ``experiments/datakit/warc_pipeline.py`` chains, ``html_to_text`` (trafilatura,
  favouring precision as datatrove's extractor does, ``min_chars=1``: every page with text becomes a
  document, as in datatrove; pages over 1 MB skipped unparsed, its default) -> ``language_id`` ->
  ``consolidate`` with ``KeepLanguages(["en"], min_score=0.65)``, each writing its output;
* datatrove 0.9: one task of a ``LocalPipelineExecutor``: ``WarcReader`` -> ``Trafilatura`` (its
  defaults, FineWeb's: ``favour_precision``, ``deduplicate``, each page extracted in a sandbox
  process that is killed after 1 s of wall time) -> ``LanguageFilter(languages=["en"],
  language_threshold=0.65)`` (the removed documents to an exclusion writer, as FineWeb kept them) ->
  ``JsonlWriter``.

Reported: wall and CPU seconds of each whole job (this process's CPU and its children's: datatrove's
sandbox) and records per second; then what each made: documents with text and their languages,
documents kept, and the records decided differently (kept by one, not the other), split by why;
and documents with text per CPU second. Where they part: datatrove's reader takes a record's media
type from ``WARC-Identified-Payload-Type``, which Common Crawl's WARCs carry and these do not, and
without it asks libmagic, which calls an XHTML page that opens with an XML declaration
``text/xml``: such pages are skipped (the guesses are printed). Its extractor's timeout is wall
time, so on a loaded machine more of the longest pages time out (counted and printed).

Two adjustments let datatrove run here, neither changing what it decides. Its ``LanguageFilter``
has two backends, fastText's ``lid.176`` and GlotLID, both models downloaded at first use, which
this machine cannot do: the model is swapped for a backend over the wheel-shipped model ours uses
(:func:`marin.processing.language.identify_language`, langid.py), shaped as datatrove's fastText
backend with ``k=1`` (the best language and its score; every other language 0): above a bar of
0.65 only the best of langid's normalised scores can be, so the filter decides as it would with
every score. It reads the text as ours does, newlines and all (the fastText backend joins lines
because fastText reads one line). And the filter's dependency check, which asks for the
distribution ``fasttext-numpy2-wheel`` (for the model no longer read; this environment's fastText
is ``fasttext-numpy2``), is skipped. The filter's rule, the reader and the extractor are
datatrove's own. The model is loaded (about a second) before either clock starts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.bench_datakit import Timings, corpus_at
from benchmarks.bench_html import ROOT
from benchmarks.bench_warc import real_pages, write_crawl
from benchmarks.workfolder import parse_bench_args, work_folder
from marin.processing.attributes import list_shards, read_records, read_summary
from marin.processing.consolidate import ConsolidateConfig, KeepLanguages, consolidate_step
from marin.processing.html import Extractor, Favor, HtmlToTextConfig, html_to_text_step
from marin.processing.language import LanguageIdConfig, identify_language, language_id_step
from marin.processing.webcorpus.crawl import CrawlConfig
from marin.processing.webcorpus.crawl import write_crawl as write_generated_crawl
from zephyr.warc import read_web_records

DEFAULT_PAGES = 2_000
DEFAULT_FOREIGN = 20
KEEP = "en"
BAR = 0.65  # FineWeb's, and experiments/datakit/warc_pipeline.py's
OURS = "ours: html_to_text, language_id, consolidate"
THEIRS = "datatrove: WarcReader, Trafilatura, LanguageFilter"


def _language_filter(**options: Any) -> Any:
    """datatrove's ``LanguageFilter`` with its model swapped for ours (see the module docstring)."""
    from datatrove.pipeline.filters import LanguageFilter  # the peer: only in .venv-bench
    from datatrove.utils.lid import LID

    class Langid(LID):
        def predict(self, doc: Any) -> tuple[tuple[str, float], dict[str, float]]:
            language, score = identify_language(doc.text)
            return (language, score), {code: score if code == language else 0.0 for code in self.languages or [language]}

    class LangidLanguageFilter(LanguageFilter):
        def __new__(cls, *_args: Any, **_options: Any) -> Any:
            # Not PipelineStep.__new__: its dependency check asks for the distribution fasttext-numpy2-wheel
            # (for the model not read here; this environment's fastText is marin's fasttext-numpy2).
            return object.__new__(cls)

        def __init__(self, **options: Any) -> None:
            super().__init__(**options)
            self.model = Langid(self.languages)

    return LangidLanguageFilter(**options)


def _ours(crawl: str, out: str) -> tuple[dict[str, str], set[str]]:
    """Run our three steps; ``({document id: language}, ids kept)``."""
    text, language, kept = (os.path.join(out, name) for name in ("text", "language", "kept"))
    html_to_text_step(HtmlToTextConfig(input=crawl, extractor=Extractor.TRAFILATURA, favor=Favor.PRECISION,
                                       min_chars=1), text)
    language_id_step(LanguageIdConfig(input=text), language)
    consolidate_step(ConsolidateConfig(input=text, filters=(KeepLanguages(language, (KEEP,), min_score=BAR),)), kept)
    found = {r["id"]: r["attributes"]["language"] for s in list_shards(language) for r in read_records(s.path)}
    return found, {r["id"] for s in list_shards(kept) for r in read_records(s.path)}


def _datatrove(crawl: str, out: str) -> tuple[dict[str, str], set[str], dict[str, dict]]:
    """Run datatrove's pipeline; ``({document id: language}, ids kept, {step: its counters})``."""
    from datatrove.executor import LocalPipelineExecutor  # the peer: only in .venv-bench
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.readers import WarcReader
    from datatrove.pipeline.writers import JsonlWriter

    languages = _language_filter(languages=[KEEP], language_threshold=BAR,
                                 exclusion_writer=JsonlWriter(os.path.join(out, "removed")))
    LocalPipelineExecutor(pipeline=[
        WarcReader(crawl, glob_pattern="*.warc.gz"), Trafilatura(), languages, JsonlWriter(os.path.join(out, "kept")),
    ], tasks=1, workers=1, logging_dir=os.path.join(out, "logs")).run()
    found, kept = {}, set()
    for folder in ("removed", "kept"):
        for shard in list_shards(os.path.join(out, folder)):
            for record in read_records(shard.path):
                found[record["id"]] = record["metadata"]["language"]
                if folder == "kept":
                    kept.add(record["id"])
    steps = json.loads(Path(out, "logs", "stats.json").read_text())
    return found, kept, {step["name"].split()[-1]: step["stats"] for step in steps}


def _guessed_types(crawl: str) -> str:
    """libmagic's media types of the responses' payloads, as datatrove's reader guesses them for
    records without ``WARC-Identified-Payload-Type`` (Common Crawl's WARCs carry it; these do not)."""
    import magic  # python-magic: only in .venv-bench

    records = [r for path in sorted(Path(crawl).glob("*.warc.gz")) for r in read_web_records(str(path))]
    counts = Counter(magic.from_buffer(r.payload, mime=True) for r in records)
    return ", ".join(f"{kind} {n}" for kind, n in counts.most_common())


def _languages(found: dict[str, str]) -> str:
    counts = Counter(found.values())
    return ", ".join(f"{lang} {n}" for lang, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def compare(title: str, crawl: str, records: int, work: str, planted: dict[str, str] | None = None) -> None:
    """Both pipelines over the WARC files in ``crawl`` (``records`` records), side by side."""
    identify_language("warm up")  # the model loads once per process: before either clock starts
    timings = Timings()
    with timings.measure(OURS, records, children=True):
        ours, ours_kept = _ours(crawl, os.path.join(work, "ours"))
    with timings.measure(THEIRS, records, children=True):
        theirs, theirs_kept, steps = _datatrove(crawl, os.path.join(work, "datatrove"))
    timings.print(f"== {title}: {records} records, English kept above {BAR} ==")
    summary = read_summary(os.path.join(work, "ours", "text"))
    problems = ", ".join(f"{kind} {entry['count']}" for kind, entry in summary["problems"].items()) or "none"
    print(f"ours: pages without a document {summary['skipped']} ({problems})")
    extractor = steps["Trafilatura"]
    print(f"datatrove: records its reader passed {steps['Warc']['documents']['total']} (by libmagic's guess: "
          f"{_guessed_types(crawl)}); extractions timed out {extractor.get('timeout', 0)}, empty "
          f"{extractor.get('dropped', 0)}")
    for label, found, kept in (("ours", ours, ours_kept), ("datatrove", theirs, theirs_kept)):
        print(f"{label:<10} documents with text {len(found)} ({_languages(found)}); kept {len(kept)}")
        if planted:
            print(f"{'':<10} planted pages in other languages kept: {sum(doc in kept for doc in planted)} of "
                  f"{len(planted)}; identified as planted: {sum(found.get(doc) == lang for doc, lang in planted.items())}")
    differ = ours_kept ^ theirs_kept
    one_text = {doc for doc in differ if (doc in ours) != (doc in theirs)}
    labelled = {doc for doc in differ - one_text if ours[doc] != theirs[doc]}
    print(f"records decided differently: {len(differ)} of {records} (text from one only: {len(one_text)}; "
          f"language differs: {len(labelled)}; same language, score on either side of the bar: "
          f"{len(differ - one_text - labelled)})")
    both = set(ours) & set(theirs)
    print(f"documents both extracted: {len(both)}, language differs on {sum(ours[d] != theirs[d] for d in both)}")
    ours_cpu, theirs_cpu = timings.rows[OURS][1], timings.rows[THEIRS][1]
    print(f"ours / datatrove, per CPU second: records {timings.rate(OURS) / timings.rate(THEIRS):.2f}x, documents "
          f"with text {len(ours) / ours_cpu:.1f} / {len(theirs) / theirs_cpu:.1f} = "
          f"{len(ours) / ours_cpu / (len(theirs) / theirs_cpu):.2f}x")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_warc_peers")
    parser.add_argument("--pages", type=int, default=DEFAULT_PAGES, help="pages of the generated corpus")
    parser.add_argument("--foreign", type=int, default=DEFAULT_FOREIGN, help="pages planted in each other language")
    parser.add_argument("--work", default=None, help="folder to keep the generated corpus in (reused)")
    args = parse_bench_args(parser, argv)
    with work_folder(args.work, "bench-warc-peers-") as work:
        corpus, _truth = corpus_at(work, args.pages)
        # Fresh outputs every run: datatrove skips the tasks its logging folder says are done.
        scratch = tempfile.mkdtemp(prefix="peers-", dir=work)
        try:
            pages = real_pages(ROOT / "build" / "site")
            if pages:
                crawl = os.path.join(scratch, "real", "crawl")
                compare("a WARC of real pages (installed documentation, this site)", crawl,
                        write_crawl(pages, crawl), os.path.join(scratch, "real"))
            else:
                print("\n== no HTML documentation on this machine (/usr/share/doc, build/site): real pages skipped ==")
            crawl = os.path.join(scratch, "generated", "crawl")
            truth = write_generated_crawl(corpus, crawl, CrawlConfig(foreign_pages=args.foreign))
            compare(f"the tutorial's crawl ({args.pages} generated pages, {args.foreign} in each of six other "
                    "languages)", crawl, truth["records"], os.path.join(scratch, "generated"), truth["languages"])
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
