"""Data curation on a generated web corpus of 20,000+ documents: each step beside the bare loop it
wraps, and near-duplicate detection's quality against what was planted.

``python -m benchmarks.bench_datakit [--pages N] [--html-pages N] [--work DIR]``

The corpus (:mod:`marin.processing.webcorpus`) holds planted exact and near-duplicates at known
Jaccard similarities, templated shop pages, quoted eval items and bad pages. Measured, wall and
CPU seconds each (this process's CPU plus its children's; compare CPU on a shared machine):

* MinHash signatures: shingling and the 128-value signature of every document, in a loop;
* fuzzy dedup, the whole step (read, shingle, sign, band, group, verify, cluster, write
  sidecars), with its records grouped in process and through zephyr's shuffle (in this process,
  and on 2 workers): the sidecars must be byte-identical, and the faster is the default;
* exact dedup, the whole step, beside a bare loop of xxh3-128 over normalised texts in a dict;
* html_to_text (trafilatura), the whole step, beside bare ``trafilatura.extract`` over the same
  pages (the first ``--html-pages`` good pages of the corpus, as files; goal: at least 0.8 of its
  throughput);
* decontamination and consolidation.

Quality: precision and recall of planted pairs at Jaccard 0.8 (:mod:`marin.processing.webcorpus.evaluate`)
on the generator's clean text. The peers (datatrove's minhash pipeline, datasketch) run in
``benchmarks.bench_datakit_peers`` under ``make bench-peers`` on the same corpus.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import xxhash

from benchmarks.workfolder import parse_bench_args, work_folder
from marin.processing.attributes import (
    iter_corpus,
    list_shards,
    read_documents,
    read_records,
    read_summary,
    write_sidecar,
)
from marin.processing.consolidate import ConsolidateConfig, DropContaminated, DropDuplicates, consolidate_step
from marin.processing.decontaminate import DecontaminateConfig, EvalSet, decontaminate_step
from marin.processing.dedup import (
    ExactDedupConfig,
    FuzzyDedupConfig,
    Grouping,
    ZephyrGroupBy,
    exact_dedup_step,
    fuzzy_dedup,
    fuzzy_dedup_step,
    shingle_set,
)
from marin.processing.html import Extractor, HtmlToTextConfig, html_to_text_step
from marin.processing.text import normalize
from marin.processing.webcorpus import (
    DOCUMENTS_FOLDER,
    EVAL_ITEMS_FILE,
    HTML_FOLDER,
    TRUTH_FILE,
    WebCorpusConfig,
    generate_web_corpus,
)
from marin.processing.webcorpus.evaluate import score_clusters

DEFAULT_PAGES = 20_500  # gives about 20,000 documents (copies, variants and shop pages included)
DEFAULT_HTML_PAGES = 2_000
THRESHOLD = 0.8
SEED = 0


class Timings:
    """Wall and CPU seconds of named blocks, in the order they ran."""
    def __init__(self) -> None:
        self.rows: dict[str, tuple[float, float, int]] = {}

    @contextmanager
    def measure(self, label: str, items: int, children: bool = False) -> Iterator[None]:
        """Time the block; ``items`` is what it processed (documents or pages). ``children``: add
        the CPU of the worker processes it started (counted once they are reaped)."""
        wall = time.perf_counter()
        cpu = time.process_time()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        yield
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        child_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime) if children else 0.0
        self.rows[label] = (time.perf_counter() - wall, time.process_time() - cpu + child_cpu, items)

    def rate(self, label: str) -> float:
        """Items per CPU second of ``label``."""
        _wall, cpu, items = self.rows[label]
        return items / max(cpu, 1e-9)

    def print(self, title: str) -> None:
        print(f"\n{title}")
        print(f"{'':<52}{'items':>8}{'wall s':>9}{'CPU s':>9}{'items/CPU s':>13}{'items/wall s':>14}")
        for label, (wall, cpu, items) in self.rows.items():
            print(f"{label:<52}{items:>8}{wall:>9.1f}{cpu:>9.1f}{items / max(cpu, 1e-9):>13.0f}{items / max(wall, 1e-9):>14.0f}")


def corpus_at(work: str, pages: int) -> tuple[str, dict]:
    """The generated corpus of ``pages`` pages under ``work`` (reused when it is there), and its truth."""
    config = WebCorpusConfig(num_pages=pages, seed=SEED, num_shards=8)
    folder = os.path.join(work, f"corpus-{pages}")
    truth_path = os.path.join(folder, TRUTH_FILE)
    if os.path.exists(truth_path):
        truth = json.loads(Path(truth_path).read_text())
        if truth["config"]["num_pages"] == pages:
            return folder, truth
    shutil.rmtree(folder, ignore_errors=True)
    started = time.perf_counter()
    truth = generate_web_corpus(folder, config)
    print(f"generated {truth['pages']} pages, {truth['documents']} documents in {time.perf_counter() - started:.0f} s")
    return folder, truth


def representatives(folder: str) -> dict[Any, Any]:
    """``{document id: its cluster's representative}`` of a dedup step's sidecars."""
    return {r["id"]: r["attributes"]["representative"] for s in list_shards(folder) for r in read_records(s.path)}


def _files(folder: str) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def _signatures(documents: str, timings: Timings, count: int) -> None:
    texts = [doc["text"] for _i, doc in iter_corpus(list_shards(documents))]
    hasher = FuzzyDedupConfig(input="", threshold=THRESHOLD).hasher()
    with timings.measure("MinHash signatures (shingles + 128 values)", count):
        for text in texts:
            shingles = shingle_set(text, 5)
            if shingles.size:
                hasher.signature(shingles)


def _fuzzy(documents: str, work: str, truth: dict, timings: Timings) -> dict[str, Any]:
    n = truth["documents"]
    config = FuzzyDedupConfig(input=documents, threshold=THRESHOLD)
    with timings.measure("fuzzy dedup step, grouped in process (default)", n):
        fuzzy_dedup_step(config, os.path.join(work, "fz-dict"))
    with timings.measure("fuzzy dedup step, grouped by zephyr in process", n):
        fuzzy_dedup_step(replace(config, grouping=Grouping.ZEPHYR), os.path.join(work, "fz-zephyr"))
    same = _files(os.path.join(work, "fz-dict")) == _files(os.path.join(work, "fz-zephyr"))
    print(f"\nfuzzy dedup sidecars identical with zephyr's grouping in process: {same}")
    if not same:
        raise AssertionError("zephyr's grouping gave other sidecars than the in-process one")
    out = os.path.join(work, "fz-dict")
    return {**score_clusters(truth, representatives(out), THRESHOLD), **read_summary(out)}


def _fuzzy_on_workers(documents: str, work: str, truth: dict, timings: Timings) -> None:
    """The fuzzy dedup with zephyr's grouping on 2 local workers (last: its processes outlive the
    measurement a little, and their CPU must not land in another one)."""
    shards = list_shards(documents)
    workers = ZephyrGroupBy(os.path.join(work, "fz-zephyr2"), in_process=False, max_parallel=2)
    with timings.measure("fuzzy dedup, grouped by zephyr on 2 workers", truth["documents"], children=True):
        result = fuzzy_dedup(shards, FuzzyDedupConfig(input=documents, threshold=THRESHOLD), workers)
        for shard, ids, attrs in zip(shards, result.ids, result.attributes, strict=True):
            write_sidecar(os.path.join(work, "fz-zephyr2-out"), shard, ids, attrs)
    sidecars = {k: v for k, v in _files(os.path.join(work, "fz-dict")).items() if not k.startswith("_")}
    same = sidecars == _files(os.path.join(work, "fz-zephyr2-out"))
    print(f"fuzzy dedup sidecars identical with zephyr's grouping on 2 workers: {same}")
    if not same:
        raise AssertionError("zephyr's grouping on workers gave other sidecars than the in-process one")


def _exact(documents: str, work: str, truth: dict, timings: Timings) -> None:
    n = truth["documents"]
    with timings.measure("exact dedup step", n):
        exact_dedup_step(ExactDedupConfig(input=documents), os.path.join(work, "exact"))
    first: dict[str, Any] = {}
    duplicates = 0
    with timings.measure("bare loop: read, xxh3-128 of normalised text, dict", n):
        for _index, doc in iter_corpus(list_shards(documents)):
            key = xxhash.xxh3_128_hexdigest(normalize(doc["text"]).encode("utf-8"))
            if key in first:
                duplicates += 1
            else:
                first[key] = doc["id"]
    found = read_summary(os.path.join(work, "exact"))["duplicates"]
    print(f"exact duplicates: step {found}, bare loop {duplicates}" + ("" if found == duplicates else "  MISMATCH"))


def _html(corpus: str, work: str, truth: dict, count: int, timings: Timings) -> None:
    """html_to_text beside bare trafilatura.extract over the same ``count`` page files (articles and
    shop pages: the planted bad pages, which the step skips unparsed, would flatter it)."""
    import trafilatura  # heavy (lxml, justext): only for this measurement

    bad = {page for pages in truth["bad_pages"].values() for page in pages}
    root = Path(corpus, HTML_FOLDER)
    pages = [p for p in sorted(root.rglob("*.html")) if str(p.relative_to(root)) not in bad][:count]
    sample = Path(work, "html-sample")
    for page in pages:
        target = sample / page.relative_to(Path(corpus, HTML_FOLDER))
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(page, target)
    config = HtmlToTextConfig(input=str(sample), extractor=Extractor.TRAFILATURA, num_shards=1)
    with timings.measure(f"html_to_text step (trafilatura), {len(pages)} pages", len(pages)):
        html_to_text_step(config, os.path.join(work, "text"))
    bare: dict[str, str] = {}
    with timings.measure(f"bare trafilatura.extract, the same {len(pages)} pages", len(pages)):
        for page in pages:
            text = trafilatura.extract(page.read_bytes().decode("utf-8", errors="replace"), deduplicate=False,
                                       output_format="txt", with_metadata=False, include_tables=True,
                                       include_comments=False)
            if text:
                bare[str(page.relative_to(Path(corpus, HTML_FOLDER)))] = text
    ours = {d["id"]: d["text"] for s in list_shards(os.path.join(work, "text")) for d in read_documents(s.path)}
    tidy = {k: "\n".join(line.strip() for line in v.splitlines() if line.strip()) for k, v in bare.items()}
    same = sum(1 for k, v in ours.items() if tidy.get(k) == v)
    step = f"html_to_text step (trafilatura), {len(pages)} pages"
    ratio = timings.rate(step) / timings.rate(f"bare trafilatura.extract, the same {len(pages)} pages")
    print(f"html_to_text: {len(ours)} documents, {same} with the same text as bare trafilatura; "
          f"throughput {ratio:.2f} of bare trafilatura's (CPU; goal >= 0.8)")


def _rest(documents: str, corpus: str, work: str, truth: dict, timings: Timings) -> None:
    n = truth["documents"]
    with timings.measure("decontaminate (13-grams, 60 items)", n):
        decontaminate_step(DecontaminateConfig(input=documents, against=(EvalSet("qa", os.path.join(corpus, EVAL_ITEMS_FILE)),)),
                           os.path.join(work, "dc"))
    with timings.measure("consolidate (3 filters)", n):
        consolidate_step(ConsolidateConfig(input=documents, filters=(
            DropContaminated(os.path.join(work, "dc")), DropDuplicates(os.path.join(work, "exact"), name="exact"),
            DropDuplicates(os.path.join(work, "fz-dict"), name="fuzzy"))), os.path.join(work, "kept"))
    dc, kept = read_summary(os.path.join(work, "dc")), read_summary(os.path.join(work, "kept"))
    print(f"decontamination: {dc['contaminated']} documents flagged, {len(truth['contaminated'])} planted")
    print(f"consolidation: {kept['documents']} documents, {kept['kept']} kept, removed {kept['removed']}")


def _print_scores(scores: dict[str, Any]) -> None:
    print(f"\nfuzzy dedup at Jaccard >= {THRESHOLD} (5-word shingles, {scores['num_perm']} permutations, "
          f"{scores['bands']} bands x {scores['rows']} rows) on the generator's clean text")
    for key in ("true_pairs", "recall", "precision", "templated_pages", "templated_merged_fraction",
                "planted_below_threshold_merged", "candidate_pairs", "verified_pairs", "rejected_pairs"):
        value = scores[key]
        print(f"  {key:<34}{value:.4f}" if isinstance(value, float) else f"  {key:<34}{value}")


def run(pages: int, html_pages: int, work: str) -> None:
    """Every measurement above, on a corpus of ``pages`` pages under ``work``."""
    corpus, truth = corpus_at(work, pages)
    documents = os.path.join(corpus, DOCUMENTS_FOLDER)
    scratch = tempfile.mkdtemp(prefix="steps-", dir=work)
    try:
        timings = Timings()
        _html(corpus, scratch, truth, html_pages, timings)
        _signatures(documents, timings, truth["documents"])
        scores = _fuzzy(documents, scratch, truth, timings)
        _exact(documents, scratch, truth, timings)
        _rest(documents, corpus, scratch, truth, timings)
        _fuzzy_on_workers(documents, scratch, truth, timings)
        dict_cpu, zephyr_cpu = (timings.rows[k][1] for k in ("fuzzy dedup step, grouped in process (default)",
                                                            "fuzzy dedup step, grouped by zephyr in process"))
        print(f"grouping: zephyr's shuffle costs {zephyr_cpu / max(dict_cpu, 1e-9):.2f}x the in-process step's CPU")
        timings.print(f"== datakit on a generated web corpus: {truth['pages']} pages, {truth['documents']} documents ==")
        _print_scores(scores)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None, runner: Callable[[int, int, str], None] = run) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_datakit")
    parser.add_argument("--pages", type=int, default=DEFAULT_PAGES, help="pages of the generated corpus")
    parser.add_argument("--html-pages", type=int, default=DEFAULT_HTML_PAGES, help="pages html_to_text is timed on")
    parser.add_argument("--work", default=None, help="folder to keep the generated corpus in (reused)")
    args = parse_bench_args(parser, argv)
    with work_folder(args.work, "bench-datakit-") as work:
        runner(args.pages, args.html_pages, work)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
