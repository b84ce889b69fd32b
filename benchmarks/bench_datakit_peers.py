"""Near-duplicate detection beside its peers: datatrove's minhash pipeline and datasketch's MinHash LSH.

``python -m benchmarks.bench_datakit_peers [--pages N] [--work DIR]`` (``make bench-peers``: the peers
live only in ``.venv-bench``), on the corpus of :mod:`benchmarks.bench_datakit` (20,000+ documents).

Each does the same job at the same settings: 5-word shingles, 128 permutations cut into 14 bands
of 9 rows (datatrove: 14 buckets of 9 hashes), Jaccard threshold 0.8. Measured, wall and CPU:

* signatures alone: shingling and signing every document (datatrove's ``get_shingles`` and
  ``get_signature``; datasketch's ``MinHash.update_batch``; our ``shingle_set`` and ``signature``);
* the whole job: ours is the fuzzy dedup step (documents in, sidecars out); datatrove's is its
  pipeline's stages 1 to 3 on a local executor, one task at a time (signatures, buckets, clusters,
  each stage's files on disk); datasketch's is signatures, ``MinHashLSH`` insert and query, and a
  union-find of the pairs found.

Clusters are compared under the verification rule: neither peer checks a candidate pair's real
similarity (datatrove joins every pair that shares a bucket), so each peer's candidate pairs
(datasketch's LSH query results, datatrove's ``.dups`` files) are kept only when the Jaccard
similarity of our shingle sets is at least the threshold, and joined. The documents whose cluster
then differs from ours are counted (LSH with other permutations finds other pairs near the
threshold), as are the planted pairs each finds (precision and recall, raw and verified).

Two adjustments let datatrove 0.9 run here, neither changing its algorithm: its English word
tokenizer (NLTK's) needs data downloaded at first use, which this machine cannot do, so its words
come from a whitespace split of its own ``simplify_text``; and its xxhash shingle hash passes
``str``, which xxhash 4 refuses, so it is given the same xxh64 of the UTF-8 bytes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.bench_datakit import THRESHOLD, Timings, corpus_at, representatives
from benchmarks.workfolder import parse_bench_args, work_folder
from marin.processing.attributes import iter_corpus, list_shards, read_summary
from marin.processing.dedup import FuzzyDedupConfig, UnionFind, fuzzy_dedup_step, jaccard, shingle_set
from marin.processing.text import words
from marin.processing.webcorpus import DOCUMENTS_FOLDER
from marin.processing.webcorpus.evaluate import score_clusters

DEFAULT_PAGES = 20_500
BANDS, ROWS, NUM_PERM, NGRAM = 14, 9, 128, 5


def _shingle_strings(text: str) -> list[bytes]:
    tokens = words(text)
    if len(tokens) < NGRAM:
        return [" ".join(tokens).encode()] if tokens else []
    return list({" ".join(tokens[i:i + NGRAM]).encode() for i in range(len(tokens) - NGRAM + 1)})


def _clusters(n: int, pairs: Any) -> list[int]:
    uf = UnionFind(n)
    uf.union_all(pairs)
    return uf.roots()


def _datasketch(texts: list[str], timings: Timings) -> tuple[list[int], list[tuple[int, int]]]:
    """datasketch's clusters (every pair its LSH finds joined) and those candidate pairs."""
    from datasketch import MinHash, MinHashLSH  # the peer: only in .venv-bench

    n = len(texts)
    with timings.measure("datasketch: signatures (MinHash.update_batch)", n):
        signs = []
        for text in texts:
            shingles = _shingle_strings(text)
            m = MinHash(num_perm=NUM_PERM, seed=1)
            if shingles:
                m.update_batch(shingles)
            signs.append(m if shingles else None)
    with timings.measure("datasketch: whole job (signatures, LSH, clusters)", n):
        signs = []
        for text in texts:
            shingles = _shingle_strings(text)
            m = MinHash(num_perm=NUM_PERM, seed=1)
            if shingles:
                m.update_batch(shingles)
            signs.append(m if shingles else None)
        lsh = MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM, params=(BANDS, ROWS))
        for g, m in enumerate(signs):
            if m is not None:
                lsh.insert(g, m)
        pairs = sorted({(min(g, h), max(g, h)) for g, m in enumerate(signs) if m is not None
                        for h in lsh.query(m) if h != g})
        roots = _clusters(n, pairs)
    return roots, pairs


def _whitespace_words() -> Any:
    """A datatrove word tokenizer that splits on whitespace (NLTK's needs downloaded data)."""
    from datatrove.utils.word_tokenizers import WordTokenizer  # the peer: only in .venv-bench

    class WhitespaceWords(WordTokenizer):
        def word_tokenize(self, text: str) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str) -> list[str]:
            return [text]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            return [(0, len(text))]

    return WhitespaceWords("en")


def _xxh64(text: str) -> int:
    """datatrove's own shingle hash (xxh64), on the bytes xxhash 4 wants."""
    import xxhash

    return xxhash.xxh64_intdigest(text.encode("utf-8"))


def _signer(output_folder: str, config: Any) -> Any:
    from datatrove.pipeline.dedup.minhash import MinhashDedupSignature  # the peer: only in .venv-bench

    signer = MinhashDedupSignature(output_folder=output_folder, config=config, language=_whitespace_words())
    signer._hash_func = _xxh64
    return signer


def _datatrove(documents: str, texts: list[str], work: str, timings: Timings) -> tuple[list[int], list[tuple[int, int]]]:
    """datatrove's clusters (its stage 3) and its candidate pairs (stage 2's ``.dups`` files)."""
    from datatrove.executor import LocalPipelineExecutor  # the peer: only in .venv-bench
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
    )
    from datatrove.pipeline.readers import JsonlReader

    n = len(texts)
    config = MinhashConfig(n_grams=NGRAM, num_buckets=BANDS, hashes_per_bucket=ROWS, seed=1)
    signer = _signer(os.path.join(work, "unused"), config)
    with timings.measure("datatrove: signatures (get_shingles, get_signature)", n):
        for text in texts:
            shingles = signer.get_shingles(text)
            if shingles.size:
                signer.get_signature(shingles)
    logs = os.path.join(work, "logs")
    with timings.measure("datatrove: whole job (stages 1-3, one task at a time)", n, children=True):
        LocalPipelineExecutor(pipeline=[
            JsonlReader(documents, glob_pattern="*.jsonl.gz", text_key="text", id_key="id"),
            _signer(os.path.join(work, "sigs"), config),
        ], tasks=1, workers=1, logging_dir=os.path.join(logs, "1")).run()
        LocalPipelineExecutor(pipeline=[
            MinhashDedupBuckets(input_folder=os.path.join(work, "sigs"), output_folder=os.path.join(work, "buckets"),
                                config=config),
        ], tasks=BANDS, workers=1, logging_dir=os.path.join(logs, "2")).run()
        LocalPipelineExecutor(pipeline=[
            MinhashDedupCluster(input_folder=os.path.join(work, "buckets"), output_folder=os.path.join(work, "clusters"),
                                config=config, save_cluster_id=True),
        ], tasks=1, workers=1, logging_dir=os.path.join(logs, "3")).run()
    # One task read the documents in our order: its document numbers are ours.
    members: dict[int, list[int]] = {}
    for path in Path(work, "clusters").glob("*.clusters"):
        for doc, cluster in struct.iter_unpack("<II", path.read_bytes()):
            members.setdefault(cluster, []).append(doc)
    candidates = sorted({(min(d1, d2), max(d1, d2)) for path in Path(work, "buckets").glob("*.dups")
                         for _f1, d1, _f2, d2 in struct.iter_unpack("<4I", path.read_bytes())})
    return _clusters(n, [(docs[0], other) for docs in members.values() for other in docs[1:]]), candidates


def _verified(n: int, candidates: list[tuple[int, int]], sets: list[Any]) -> list[int]:
    """The clusters of the candidate pairs whose Jaccard similarity is at least the threshold."""
    return _clusters(n, [(a, b) for a, b in candidates if jaccard(sets[a], sets[b]) >= THRESHOLD])


def _partition(roots: list[int]) -> dict[int, frozenset[int]]:
    groups: dict[int, set[int]] = {}
    for g, r in enumerate(roots):
        groups.setdefault(r, set()).add(g)
    return {g: frozenset(groups[r]) for g, r in enumerate(roots)}


def run(pages: int, work: str) -> None:
    corpus, truth = corpus_at(work, pages)
    documents = os.path.join(corpus, DOCUMENTS_FOLDER)
    docs = [doc for _i, doc in iter_corpus(list_shards(documents))]
    ids, texts = [d["id"] for d in docs], [d["text"] for d in docs]
    n = len(texts)
    scratch = tempfile.mkdtemp(prefix="peers-", dir=work)
    try:
        timings = Timings()
        config = FuzzyDedupConfig(input=documents, threshold=THRESHOLD, num_perm=NUM_PERM, bands=BANDS, rows=ROWS)
        hasher = config.hasher()
        with timings.measure("ours: signatures (shingle_set, signature)", n):
            sets = [shingle_set(text, NGRAM) for text in texts]
            for s in sets:
                if s.size:
                    hasher.signature(s)
        with timings.measure("ours: whole job (the fuzzy dedup step)", n):
            fuzzy_dedup_step(config, os.path.join(scratch, "ours"))
        rep = representatives(os.path.join(scratch, "ours"))
        index = {doc_id: g for g, doc_id in enumerate(ids)}
        ours = [index[rep[doc_id]] for doc_id in ids]
        peers = {"datasketch": _datasketch(texts, timings), "datatrove": _datatrove(documents, texts, scratch, timings)}
        timings.print(f"== near-duplicates beside the peers: {n} documents, {BANDS} bands x {ROWS} rows, "
                      f"threshold {THRESHOLD} ==")
        mine = _partition(ours)
        ours_score = score_clusters(truth, rep, THRESHOLD)
        print(f"\nclusters against the {ours_score['true_pairs']} planted pairs of Jaccard >= {THRESHOLD} "
              "(raw: as the tool clusters; verified: its candidate pairs kept when their Jaccard is >= the threshold)")
        print(f"{'':<14}{'candidates':>11}{'raw precision':>15}{'raw recall':>12}{'verified precision':>20}"
              f"{'verified recall':>17}{'documents clustered unlike ours':>33}")
        print(f"{'ours':<14}{read_summary(os.path.join(scratch, 'ours'))['candidate_pairs']:>11}"
              f"{ours_score['precision']:>15.4f}{ours_score['recall']:>12.4f}{ours_score['precision']:>20.4f}"
              f"{ours_score['recall']:>17.4f}{0:>33}")
        for label, (roots, candidates) in peers.items():
            raw = score_clusters(truth, {ids[g]: ids[r] for g, r in enumerate(roots)}, THRESHOLD)
            checked_roots = _verified(n, candidates, sets)
            checked = score_clusters(truth, {ids[g]: ids[r] for g, r in enumerate(checked_roots)}, THRESHOLD)
            theirs = _partition(checked_roots)
            differ = sum(1 for g in range(n) if theirs[g] != mine[g])
            print(f"{label:<14}{len(candidates):>11}{raw['precision']:>15.4f}{raw['recall']:>12.4f}"
                  f"{checked['precision']:>20.4f}{checked['recall']:>17.4f}{differ:>33}")
        ours_sign, ours_job = timings.rate("ours: signatures (shingle_set, signature)"), \
            timings.rate("ours: whole job (the fuzzy dedup step)")
        print("\nours / peer, documents per CPU second:")
        for peer, sign, job in (("datasketch", "datasketch: signatures (MinHash.update_batch)",
                                 "datasketch: whole job (signatures, LSH, clusters)"),
                                ("datatrove", "datatrove: signatures (get_shingles, get_signature)",
                                 "datatrove: whole job (stages 1-3, one task at a time)")):
            print(f"  {peer:<12} signatures {ours_sign / timings.rate(sign):.2f}x, whole job {ours_job / timings.rate(job):.2f}x")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_datakit_peers")
    parser.add_argument("--pages", type=int, default=DEFAULT_PAGES)
    parser.add_argument("--work", default=None, help="folder to keep the generated corpus in (reused)")
    args = parse_bench_args(parser, argv)
    with work_folder(args.work, "bench-datakit-peers-") as work:
        run(args.pages, work)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
