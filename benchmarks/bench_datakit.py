"""Data curation on the generated web corpus: quality of near-duplicate detection and time per step.

``python -m benchmarks.bench_datakit [--pages N] [--extractor trafilatura|resiliparse|none]``

Generates a corpus of N pages (planted exact and near duplicates at known Jaccard similarities,
templated shop pages, quoted eval items, bad pages), extracts text from its HTML, and runs exact
and fuzzy dedup, decontamination and consolidation on the extracted documents. Reported:
wall and CPU seconds per step, and for fuzzy dedup the precision and recall of planted pairs at the 0.8
threshold (:mod:`marin.processing.webcorpus.evaluate`), the share of templated pages merged, and
the candidate / verified / rejected pair counts. The same scores on the generator's clean text
(a perfect extractor) are shown beside, so extraction's effect is visible.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

from marin.processing.attributes import list_shards, read_records, read_summary
from marin.processing.consolidate import ConsolidateConfig, DropContaminated, DropDuplicates, consolidate_step
from marin.processing.decontaminate import DecontaminateConfig, EvalSet, decontaminate_step
from marin.processing.dedup import ExactDedupConfig, FuzzyDedupConfig, exact_dedup_step, fuzzy_dedup_step
from marin.processing.html import Extractor, HtmlToTextConfig, html_to_text_step
from marin.processing.webcorpus import WebCorpusConfig, generate_web_corpus
from marin.processing.webcorpus.evaluate import score_clusters

DEFAULT_PAGES = 5000
THRESHOLD = 0.8


def _timed(label: str, times: dict[str, tuple[float, float]], fn: Any, *args: Any) -> None:
    """Wall and CPU seconds of ``fn(*args)`` (CPU time is what to compare on a shared machine)."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn(*args)
    times[label] = (time.perf_counter() - wall, time.process_time() - cpu)


def _fuzzy(docs: str, out: str, truth: dict, times: dict[str, tuple[float, float]], label: str) -> dict[str, Any]:
    _timed(label, times, fuzzy_dedup_step, FuzzyDedupConfig(input=docs, threshold=THRESHOLD), out)
    representative = {r["id"]: r["attributes"]["representative"] for s in list_shards(out) for r in read_records(s.path)}
    return {**score_clusters(truth, representative, THRESHOLD), **read_summary(out)}


def run(pages: int, extractor: str, work: str) -> None:
    times: dict[str, tuple[float, float]] = {}
    corpus = os.path.join(work, "corpus")
    truth: dict = {}

    def generate() -> None:
        truth.update(generate_web_corpus(corpus, WebCorpusConfig(num_pages=pages, seed=0, num_shards=8)))

    _timed("generate corpus", times, generate)
    scores = {"clean text": _fuzzy(f"{corpus}/documents", os.path.join(work, "fz-clean"), truth, times,
                                   "fuzzy dedup (clean text)")}
    docs = f"{corpus}/documents"
    if extractor != "none":
        docs = os.path.join(work, "docs")
        _timed(f"html_to_text ({extractor})", times, html_to_text_step,
               HtmlToTextConfig(input=f"{corpus}/html", extractor=Extractor(extractor), num_shards=8), docs)
        scores[f"{extractor} text"] = _fuzzy(docs, os.path.join(work, "fz"), truth, times, "fuzzy dedup (extracted)")
    _timed("exact dedup", times, exact_dedup_step, ExactDedupConfig(input=docs), os.path.join(work, "exact"))
    _timed("decontaminate", times, decontaminate_step,
           DecontaminateConfig(input=docs, against=(EvalSet("qa", f"{corpus}/eval/items.jsonl"),)), os.path.join(work, "dc"))
    fuzzy_out = os.path.join(work, "fz" if extractor != "none" else "fz-clean")
    _timed("consolidate", times, consolidate_step, ConsolidateConfig(input=docs, filters=(
        DropContaminated(os.path.join(work, "dc")), DropDuplicates(os.path.join(work, "exact"), name="exact"),
        DropDuplicates(fuzzy_out, name="fuzzy"))), os.path.join(work, "kept"))

    print(f"\n== datakit on a generated web corpus: {truth['pages']} pages, {truth['documents']} documents ==")
    print(f"{'step':<34}{'wall s':>10}{'CPU s':>10}{'docs/CPU s':>12}")
    for label, (wall, cpu) in times.items():
        print(f"{label:<34}{wall:>10.1f}{cpu:>10.1f}{truth['documents'] / max(cpu, 1e-9):>12.0f}")
    print(f"\nfuzzy dedup at Jaccard >= {THRESHOLD} (5-word shingles, 128 permutations)")
    keys = ("true_pairs", "recall", "precision", "templated_pages", "templated_merged_fraction",
            "planted_below_threshold_merged", "candidate_pairs", "verified_pairs", "rejected_pairs", "bands", "rows")
    print(f"{'':<32}" + "".join(f"{name:>18}" for name in scores))
    for key in keys:
        cells = "".join(f"{s[key]:>18.4f}" if isinstance(s[key], float) else f"{s[key]:>18}" for s in scores.values())
        print(f"{key:<32}{cells}")
    dc = read_summary(os.path.join(work, "dc"))
    kept = read_summary(os.path.join(work, "kept"))
    print(f"\ndecontamination: {dc['contaminated']} documents flagged, {len(truth['contaminated'])} planted")
    print(f"consolidation: {kept['documents']} documents, {kept['kept']} kept, removed {kept['removed']}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_datakit")
    parser.add_argument("--pages", type=int, default=DEFAULT_PAGES)
    parser.add_argument("--extractor", choices=[e.value for e in Extractor] + ["none"], default="resiliparse")
    args = parser.parse_args(argv if argv is not None else [])
    with tempfile.TemporaryDirectory(prefix="bench-datakit-") as work:
        run(args.pages, args.extractor, work)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
