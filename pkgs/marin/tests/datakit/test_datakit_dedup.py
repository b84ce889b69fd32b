"""Deduplication: MinHash/LSH parts, union-find, exact documents and paragraphs, and near-duplicates
on a generated web corpus with planted pairs of known Jaccard similarity."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from marin.processing.attributes import list_shards, read_documents, read_records, read_summary, write_jsonl
from marin.processing.dedup import (
    ExactDedupConfig,
    FuzzyDedupConfig,
    Grouping,
    MinHasher,
    ParagraphDedupConfig,
    UnionFind,
    ZephyrGroupBy,
    detection_probability,
    exact_dedup_step,
    fuzzy_dedup,
    fuzzy_dedup_step,
    group_in_process,
    jaccard,
    optimal_bands,
    paragraph_dedup_step,
    shingle_set,
)
from marin.processing.dedup.grouping import step_group_by
from marin.processing.webcorpus import WebCorpusConfig, generate_web_corpus
from marin.processing.webcorpus.evaluate import score_clusters


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    out = str(tmp_path_factory.mktemp("webcorpus"))
    truth = generate_web_corpus(out, WebCorpusConfig(num_pages=400, seed=3, near_duplicate_fraction=0.12,
                                                     templated_fraction=0.2, bad_pages_per_kind=0, num_shards=3))
    return out, truth


def _attributes(folder: str) -> dict[Any, dict]:
    return {r["id"]: r["attributes"] for s in list_shards(folder) for r in read_records(s.path)}


def _reshard(documents: str, out: Path, num_shards: int) -> str:
    docs = [d for s in list_shards(documents) for d in read_documents(s.path)]
    for k in range(num_shards):
        write_jsonl(str(out / f"part-{k:05d}.jsonl"), docs[k * len(docs) // num_shards:(k + 1) * len(docs) // num_shards])
    return str(out)


def test_bands_minimise_the_weighted_error_and_fit_the_signature() -> None:
    for threshold in (0.5, 0.8, 0.9):
        bands, rows = optimal_bands(threshold, 128, 0.5)
        assert bands * rows <= 128
        # The S-curve crosses one half near the threshold it was chosen for.
        assert detection_probability(threshold - 0.15, bands, rows) < 0.5 < detection_probability(threshold + 0.1, bands, rows)
    # Weighting misses up moves the curve left: more candidates, fewer misses.
    b_even, r_even = optimal_bands(0.8, 128, 0.5)
    b_recall, r_recall = optimal_bands(0.8, 128, 0.9)
    assert detection_probability(0.85, b_recall, r_recall) > detection_probability(0.85, b_even, r_even)
    with pytest.raises(ValueError, match="threshold must be in"):
        optimal_bands(1.0, 128)


def test_signatures_estimate_jaccard_and_are_seeded() -> None:
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(3000)]
    base = [rng.choice(vocab) for _ in range(600)]
    edited = list(base)
    for i in range(0, 600, 20):
        edited[i] = f"new{i}"
    a, b = shingle_set(" ".join(base), 5), shingle_set(" ".join(edited), 5)
    hasher = MinHasher(num_perm=256, bands=32, rows=8, seed=1)
    sa, sb = hasher.signature(a), hasher.signature(b)
    estimate = float(np.mean(sa == sb))
    assert abs(estimate - jaccard(a, b)) < 0.08
    assert np.array_equal(sa, MinHasher(num_perm=256, bands=32, rows=8, seed=1).signature(a))
    assert not np.array_equal(sa, MinHasher(num_perm=256, bands=32, rows=8, seed=2).signature(a))
    assert len(hasher.band_keys(sa)) == 32
    with pytest.raises(ValueError, match="bands \\* rows must be <= num_perm"):
        MinHasher(num_perm=10, bands=4, rows=3)


def test_short_texts_have_one_shingle_and_empty_ones_none() -> None:
    assert shingle_set("only three words", 5).size == 1
    assert shingle_set("  ...  ", 5).size == 0
    assert jaccard(shingle_set("a b c d e f", 5), shingle_set("a b c d e g", 5)) == pytest.approx(1 / 3)


def test_union_find_root_is_the_smallest_member_whatever_the_edge_order() -> None:
    edges = [(5, 9), (9, 2), (7, 8), (2, 3), (8, 1), (4, 4)]
    expected = None
    for seed in range(5):
        shuffled = list(edges)
        random.Random(seed).shuffle(shuffled)
        uf = UnionFind(10)
        uf.union_all((b, a) if seed % 2 else (a, b) for a, b in shuffled)
        roots = uf.roots()
        expected = expected or roots
        assert roots == expected
    assert expected == [0, 1, 2, 2, 4, 2, 6, 1, 1, 2]


def test_exact_dedup_keeps_the_first_copy_in_corpus_order(tmp_path: Path) -> None:
    write_jsonl(str(tmp_path / "in" / "a.jsonl"), [{"id": "x1", "text": "Hello   World"}, {"id": "x2", "text": "other"}])
    write_jsonl(str(tmp_path / "in" / "b.jsonl.gz"), [{"id": "x3", "text": "hello world\n"}, {"id": "x0", "text": "Other"}])
    exact_dedup_step(ExactDedupConfig(input=str(tmp_path / "in")), str(tmp_path / "out"))
    attrs = _attributes(str(tmp_path / "out"))
    assert [attrs[i]["duplicate"] for i in ("x1", "x2", "x3", "x0")] == [False, False, True, True]
    # The representative is the first by (shard, line), not the smallest id.
    assert attrs["x3"]["representative"] == "x1" and attrs["x0"]["representative"] == "x2"
    assert attrs["x3"]["cluster"] == attrs["x1"]["cluster"] != attrs["x2"]["cluster"]
    summary = read_summary(str(tmp_path / "out"))
    assert (summary["documents"], summary["duplicates"], summary["clusters"]) == (4, 2, 2)
    # Sidecars carry the input's shard names, compression included.
    assert sorted(s.name for s in list_shards(str(tmp_path / "out"))) == ["a.jsonl", "b.jsonl.gz"]


def test_paragraph_spans_are_exact_offsets_of_repeated_paragraphs(tmp_path: Path) -> None:
    first = "Intro line.\n  Shared paragraph here.  \n\nUnique one.\nShared paragraph here."
    second = "Other start\nSHARED   paragraph here.\nIntro line.\nNew ending."
    write_jsonl(str(tmp_path / "in" / "p.jsonl"), [{"id": 1, "text": first}, {"id": 2, "text": second}])
    paragraph_dedup_step(ParagraphDedupConfig(input=str(tmp_path / "in")), str(tmp_path / "out"))
    attrs = _attributes(str(tmp_path / "out"))
    spans_1 = attrs[1]["duplicate_spans"]
    assert [first[a:b] for a, b in spans_1] == ["Shared paragraph here."]
    assert spans_1[0][0] == first.rindex("Shared paragraph here.")
    # Normalised comparison (case, whitespace); the span is the text as it stands in this document.
    assert [second[a:b] for a, b in attrs[2]["duplicate_spans"]] == ["SHARED   paragraph here.", "Intro line."]
    assert attrs[2]["duplicate_chars"] == len("SHARED   paragraph here.") + len("Intro line.")
    assert read_summary(str(tmp_path / "out"))["duplicate_paragraphs"] == 3


def test_planted_near_duplicates_are_found_and_templated_pages_kept_apart(corpus: tuple[str, dict], tmp_path: Path) -> None:
    root, truth = corpus
    fuzzy_dedup_step(FuzzyDedupConfig(input=f"{root}/documents"), str(tmp_path / "fz"))
    attrs = _attributes(str(tmp_path / "fz"))
    representative = {doc: a["representative"] for doc, a in attrs.items()}
    same = {(p["a"], p["b"]): representative[p["a"]] == representative[p["b"]] for p in truth["pairs"]}
    above = [pair for pair in truth["pairs"] if pair["jaccard"] >= 0.85]
    below = [pair for pair in truth["pairs"] if pair["jaccard"] <= 0.72]
    assert len(above) >= 20 and len(below) >= 10
    assert all(same[(p["a"], p["b"])] for p in above)
    assert not any(same[(p["a"], p["b"])] for p in below)
    score = score_clusters(truth, representative, 0.8)
    assert score["templated_pages"] >= 60 and score["templated_merged"] == 0
    assert score["precision"] == 1.0 and score["recall"] >= 0.95
    summary = read_summary(str(tmp_path / "fz"))
    assert summary["candidate_pairs"] == summary["verified_pairs"] + summary["rejected_pairs"]
    assert summary["rejected_pairs"] > 0 and summary["duplicates"] == sum(a["duplicate"] for a in attrs.values())
    for doc, a in attrs.items():
        if a["duplicate"]:
            assert a["jaccard"] >= 0.8 and a["representative"] < doc  # ids sort in corpus order here


class _Recording:
    """A GroupBy that records what each grouping yields, visiting groups in reverse key order."""

    def __init__(self) -> None:
        self.outputs: list[list[Any]] = []

    def __call__(self, records: Iterable[Any], key: Callable[[Any], Any],
                 reducer: Callable[[Any, list[Any]], Iterable[Any]]) -> Iterator[Any]:
        groups: dict[Any, list[Any]] = {}
        for record in reversed(list(records)):
            groups.setdefault(key(record), []).append(record)
        out = [item for k in sorted(groups, reverse=True) for item in reducer(k, groups[k])]
        self.outputs.append(out)
        return iter(out)


def test_verification_is_what_keeps_templated_pages_apart(corpus: tuple[str, dict]) -> None:
    root, truth = corpus
    shards = list_shards(f"{root}/documents")
    recording = _Recording()
    result = fuzzy_dedup(shards, FuzzyDedupConfig(input=""), group_by=recording)
    # Another grouping order gives the same answer as the in-process one.
    assert result.attributes == fuzzy_dedup(shards, FuzzyDedupConfig(input=""), group_by=group_in_process).attributes
    candidates = recording.outputs[-1]  # the last grouping: distinct candidate pairs
    assert len(candidates) == result.stats["candidate_pairs"]
    ids = [doc_id for shard_ids in result.ids for doc_id in shard_ids]
    templated = {doc for shop in truth["templated"].values() for doc in shop["pages"]}
    unverified = UnionFind(len(ids))
    unverified.union_all(candidates)
    sizes: dict[int, int] = {}
    for root_index in unverified.roots():
        sizes[root_index] = sizes.get(root_index, 0) + 1
    merged_unverified = sum(1 for g, r in enumerate(unverified.roots()) if ids[g] in templated and sizes[r] > 1)
    # Without verification, shared boilerplate chains templated pages together ...
    assert merged_unverified >= len(templated) // 4
    # ... with it, none is a duplicate.
    flat = {doc_id: a for shard_ids, attrs in zip(result.ids, result.attributes, strict=True)
            for doc_id, a in zip(shard_ids, attrs, strict=True)}
    assert not any(flat[doc]["duplicate"] for doc in templated)


def test_fuzzy_dedup_is_deterministic_and_independent_of_sharding(corpus: tuple[str, dict], tmp_path: Path) -> None:
    root, _truth = corpus
    one = _reshard(f"{root}/documents", tmp_path / "one", 1)
    five = _reshard(f"{root}/documents", tmp_path / "five", 5)
    outputs = {}
    for name, source in (("one", one), ("again", one), ("five", five)):
        fuzzy_dedup_step(FuzzyDedupConfig(input=source), str(tmp_path / f"fz-{name}"))
        outputs[name] = _attributes(str(tmp_path / f"fz-{name}"))
    built = sorted(a.relative_to(tmp_path / "fz-one") for a in (tmp_path / "fz-one").rglob("*") if a.is_file())
    assert built == sorted(a.relative_to(tmp_path / "fz-again") for a in (tmp_path / "fz-again").rglob("*") if a.is_file())
    for rel in built:
        assert (tmp_path / "fz-one" / rel).read_bytes() == (tmp_path / "fz-again" / rel).read_bytes(), rel
    assert outputs["one"] == outputs["five"]
    summaries = [json.loads((tmp_path / f"fz-{n}" / "_summary.json").read_text()) for n in ("one", "five")]
    assert summaries[0]["duplicates"] == summaries[1]["duplicates"] > 0


def test_exact_dedup_is_independent_of_sharding(corpus: tuple[str, dict], tmp_path: Path) -> None:
    root, truth = corpus
    results = []
    for n in (1, 4):
        source = _reshard(f"{root}/documents", tmp_path / f"in{n}", n)
        exact_dedup_step(ExactDedupConfig(input=source), str(tmp_path / f"out{n}"))
        results.append(_attributes(str(tmp_path / f"out{n}")))
    assert results[0] == results[1]
    exact_pairs = [p for p in truth["pairs"] if p["kind"] == "exact"]
    assert exact_pairs and all(results[0][p["b"]]["representative"] == results[0][p["a"]]["representative"]
                               for p in exact_pairs)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_zephyrs_shuffle_gives_the_same_sidecars_and_leaves_no_work_files(corpus: tuple[str, dict], tmp_path: Path) -> None:
    root, _truth = corpus
    docs = f"{root}/documents"
    for name, fn, config in (("exact", exact_dedup_step, ExactDedupConfig(input=docs)),
                             ("para", paragraph_dedup_step, ParagraphDedupConfig(input=docs, min_chars=20)),
                             ("fuzzy", fuzzy_dedup_step, FuzzyDedupConfig(input=docs))):
        fn(config, str(tmp_path / f"{name}-dict"))
        fn(replace(config, grouping=Grouping.ZEPHYR), str(tmp_path / f"{name}-zephyr"))
        dict_files, zephyr_files = _files(tmp_path / f"{name}-dict"), _files(tmp_path / f"{name}-zephyr")
        assert dict_files == zephyr_files, name  # byte for byte; no .shuffle/ left behind
        assert any(a["duplicate"] if "duplicate" in a else a["duplicate_spans"]
                   for a in _attributes(str(tmp_path / f"{name}-zephyr")).values()), name


def test_zephyrs_shuffle_on_worker_processes_gives_the_same_sidecars(corpus: tuple[str, dict], tmp_path: Path) -> None:
    root, _truth = corpus
    with step_group_by(Grouping.ZEPHYR_WORKERS, str(tmp_path / "out")) as group_by:
        assert isinstance(group_by, ZephyrGroupBy) and not group_by.in_process  # tasks go to worker processes
    with step_group_by(Grouping.ZEPHYR, str(tmp_path / "out")) as group_by:
        assert isinstance(group_by, ZephyrGroupBy) and group_by.in_process
    config = ExactDedupConfig(input=f"{root}/documents")
    exact_dedup_step(config, str(tmp_path / "dict"))
    exact_dedup_step(replace(config, grouping=Grouping.ZEPHYR_WORKERS), str(tmp_path / "workers"))
    assert _files(tmp_path / "dict") == _files(tmp_path / "workers")  # byte for byte; no .shuffle/ left


def test_zephyr_group_by_writes_its_partitions_under_the_work_folder(tmp_path: Path) -> None:
    records = [(f"k{i % 7}", i) for i in range(50)]
    group_by = ZephyrGroupBy(str(tmp_path / "work"), map_tasks=3, num_partitions=2)
    grouped = sorted(group_by(records, _key_of, _sizes))
    assert grouped == sorted(group_in_process(records, _key_of, _sizes))
    assert grouped[0] == ("k0", 8)
    assert sorted(p.name for p in (tmp_path / "work" / ".shuffle" / "sizes").glob("*.shuffle")) == [
        "part-00000.shuffle", "part-00001.shuffle", "part-00002.shuffle"]


def _key_of(record: tuple[str, int]) -> str:
    return record[0]


def _sizes(key: str, members: Iterable[tuple[str, int]]) -> Iterator[tuple[str, int]]:
    yield key, sum(1 for _ in members)


def test_configs_name_bad_values() -> None:
    with pytest.raises(ValueError, match="threshold must be in \\(0, 1\\), got 1.5"):
        FuzzyDedupConfig(input="x", threshold=1.5)
    with pytest.raises(ValueError, match="num_perm must be >= 1, got 0"):
        FuzzyDedupConfig(input="x", num_perm=0)
    with pytest.raises(ValueError, match="bands and rows go together"):
        FuzzyDedupConfig(input="x", bands=4)
    with pytest.raises(ValueError, match="min_chars must be >= 0"):
        ParagraphDedupConfig(input="x", min_chars=-1)
