"""Consolidation: filters in lockstep with their sidecars, counts that add up, ready for tokenization."""

from __future__ import annotations

from pathlib import Path

import pytest

from marin.processing.attributes import list_shards, read_documents, read_summary, write_jsonl
from marin.processing.consolidate import (
    ConsolidateConfig,
    DropContaminated,
    DropDuplicates,
    KeepHeuristics,
    KeepScore,
    RemoveDuplicateSpans,
    consolidate_step,
)
from marin.processing.decontaminate import DecontaminateConfig, EvalSet, decontaminate_step
from marin.processing.dedup import (
    ExactDedupConfig,
    FuzzyDedupConfig,
    ParagraphDedupConfig,
    exact_dedup_step,
    fuzzy_dedup_step,
    paragraph_dedup_step,
)
from marin.processing.html import Extractor, HtmlToTextConfig, html_to_text_step
from marin.processing.quality import (
    ClassifyConfig,
    HeuristicRule,
    HeuristicsConfig,
    QualityClassifierConfig,
    classify_step,
    heuristics_step,
    quality_classifier_step,
)
from marin.processing.webcorpus import WebCorpusConfig, generate_web_corpus
from zephyr import DataError
from zephyr import read_documents as zephyr_documents


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("pipeline")
    corpus = str(root / "corpus")
    generate_web_corpus(corpus, WebCorpusConfig(num_pages=150, seed=4, bad_pages_per_kind=0, contaminated_pages=6,
                                                eval_items=20, near_duplicate_fraction=0.1))
    docs = f"{corpus}/documents"
    paths = {"docs": docs, "eval": f"{corpus}/eval/items.jsonl"}
    for name, fn, config in (
        ("exact", exact_dedup_step, ExactDedupConfig(input=docs)),
        ("fuzzy", fuzzy_dedup_step, FuzzyDedupConfig(input=docs)),
        ("para", paragraph_dedup_step, ParagraphDedupConfig(input=docs)),
        ("heur", heuristics_step, HeuristicsConfig(input=docs)),
        ("dc", decontaminate_step, DecontaminateConfig(input=docs, against=(EvalSet("qa", paths["eval"]),))),
    ):
        paths[name] = str(root / name)
        fn(config, paths[name])
    return paths


def _kept(folder: str) -> list[dict]:
    return [d for s in list_shards(folder) for d in read_documents(s.path)]


def test_counts_add_up_and_removals_are_explained(pipeline: dict[str, str], tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    filters = (DropContaminated(pipeline["dc"]), DropDuplicates(pipeline["exact"], name="exact"),
               DropDuplicates(pipeline["fuzzy"], name="fuzzy"),
               KeepHeuristics(pipeline["heur"], rules=(HeuristicRule.WORD_COUNT, HeuristicRule.STOP_WORDS)),
               RemoveDuplicateSpans(pipeline["para"]))
    consolidate_step(ConsolidateConfig(input=pipeline["docs"], filters=filters), out)
    summary = read_summary(out)
    assert summary["documents"] == summary["kept"] + sum(summary["removed"].values())
    assert summary["removed"]["contaminated"] == read_summary(pipeline["dc"])["contaminated"] == 6
    # Exact copies go to the exact filter first; fuzzy dedup finds them too but they are already gone.
    exact = read_summary(pipeline["exact"])["duplicates"]
    assert summary["removed"]["exact"] == exact > 0
    assert 0 < summary["removed"]["fuzzy"] <= read_summary(pipeline["fuzzy"])["duplicates"] - exact
    kept = _kept(out)
    assert len(kept) == summary["kept"]
    # Same shard names as the input, ready for the tokenizer's reader (summary file excluded).
    assert [s.name for s in list_shards(out)] == [s.name for s in list_shards(pipeline["docs"])]
    assert list(zephyr_documents(out)) == [d["text"] for d in kept]
    example = summary["examples"]["exact"][0]
    assert example["why"].startswith("duplicate of") and example["representative"]["snippet"]
    by_id = {d["id"]: d for s in list_shards(pipeline["docs"]) for d in read_documents(s.path)}
    assert example["representative"]["snippet"][:40] == " ".join(by_id[example["representative"]["id"]]["text"].split())[:40]
    assert summary["examples"]["contaminated"][0]["why"].startswith("overlap 1.0 with qa item")
    # Paragraph dedup cut repeated lines (the shared intro/outro lines) out of kept documents.
    assert summary["edited"]["duplicate_paragraphs"] > 0
    assert sum(len(d["text"]) for d in kept) < sum(len(by_id[d["id"]]["text"]) for d in kept)


def test_score_filters_min_score_and_top_fraction_with_ties(tmp_path: Path) -> None:
    docs = [{"id": f"d{i}", "text": f"document number {i}"} for i in range(10)]
    scores = [0.9, 0.5, 0.5, 0.1, 0.5, 0.7, 0.5, 0.2, 0.95, 0.5]
    write_jsonl(str(tmp_path / "docs" / "a.jsonl"), docs[:6])
    write_jsonl(str(tmp_path / "docs" / "b.jsonl"), docs[6:])
    write_jsonl(str(tmp_path / "scores" / "a.jsonl"), [{"id": d["id"], "attributes": {"score": s}} for d, s in zip(docs[:6], scores[:6], strict=True)])
    write_jsonl(str(tmp_path / "scores" / "b.jsonl"), [{"id": d["id"], "attributes": {"score": s}} for d, s in zip(docs[6:], scores[6:], strict=True)])
    top = str(tmp_path / "top")
    consolidate_step(ConsolidateConfig(input=str(tmp_path / "docs"),
                                       filters=(KeepScore(str(tmp_path / "scores"), top_fraction=0.5),)), top)
    # floor(0.5 * 10) = 5: 0.95, 0.9, 0.7, then two of the five 0.5s, the earliest in corpus order.
    assert [d["id"] for d in _kept(top)] == ["d0", "d1", "d2", "d5", "d8"]
    assert read_summary(top)["removed"] == {"quality": 5}
    low = str(tmp_path / "low")
    consolidate_step(ConsolidateConfig(input=str(tmp_path / "docs"),
                                       filters=(KeepScore(str(tmp_path / "scores"), min_score=0.5),)), low)
    assert [d["id"] for d in _kept(low)] == ["d0", "d1", "d2", "d4", "d5", "d6", "d8", "d9"]
    with pytest.raises(ValueError, match="give exactly one of min_score and top_fraction"):
        KeepScore("x")


def test_mismatched_sidecars_name_the_file_and_line(tmp_path: Path) -> None:
    write_jsonl(str(tmp_path / "docs" / "a.jsonl"), [{"id": 1, "text": "one"}, {"id": 2, "text": "two"}])
    write_jsonl(str(tmp_path / "attrs" / "a.jsonl"), [
        {"id": 1, "attributes": {"duplicate": False}}, {"id": 3, "attributes": {"duplicate": False}}])
    with pytest.raises(DataError, match="a.jsonl: line 2: id 3 does not match the document's id 2"):
        consolidate_step(ConsolidateConfig(input=str(tmp_path / "docs"),
                                           filters=(DropDuplicates(str(tmp_path / "attrs")),)), str(tmp_path / "out"))
    write_jsonl(str(tmp_path / "short" / "a.jsonl"), [{"id": 1, "attributes": {"duplicate": False}}])
    with pytest.raises(DataError, match="line 2: sidecar ends before the documents"):
        consolidate_step(ConsolidateConfig(input=str(tmp_path / "docs"),
                                           filters=(DropDuplicates(str(tmp_path / "short")),)), str(tmp_path / "out"))
    with pytest.raises(DataError, match="no attribute sidecar for the document shard 'a.jsonl'"):
        consolidate_step(ConsolidateConfig(input=str(tmp_path / "docs"),
                                           filters=(DropDuplicates(str(tmp_path / "none")),)), str(tmp_path / "out"))
    with pytest.raises(ValueError, match="filter names must be distinct"):
        ConsolidateConfig(input="x", filters=(DropDuplicates("a"), DropDuplicates("b")))


def test_whole_pipeline_on_an_object_store(memory_prefix: str) -> None:
    """Every step reads and writes through rigging's file systems (memory:// here), and every
    attribute step's sidecars carry the names and order of the input shards."""
    root = memory_prefix
    generate_web_corpus(f"{root}/corpus", WebCorpusConfig(num_pages=60, seed=6, bad_pages_per_kind=1,
                                                          oversized_bytes=20_000, eval_items=10, contaminated_pages=3))
    text = f"{root}/text"
    html_to_text_step(HtmlToTextConfig(input=f"{root}/corpus/html", extractor=Extractor.RESILIPARSE,
                                       max_bytes=15_000, num_shards=3), text)
    quality_classifier_step(QualityClassifierConfig(positive=text, negative=f"{root}/corpus/documents"), f"{root}/model")
    steps = {
        "exact": (exact_dedup_step, ExactDedupConfig(input=text)),
        "fuzzy": (fuzzy_dedup_step, FuzzyDedupConfig(input=text)),
        "para": (paragraph_dedup_step, ParagraphDedupConfig(input=text)),
        "heur": (heuristics_step, HeuristicsConfig(input=text)),
        "dc": (decontaminate_step, DecontaminateConfig(input=text, against=(EvalSet("qa", f"{root}/corpus/eval"),))),
        "cls": (classify_step, ClassifyConfig(input=text, model=f"{root}/model")),
    }
    input_shards = [s.name for s in list_shards(text)]
    assert input_shards == [f"part-{k:05d}.jsonl.gz" for k in range(3)]
    for name, (fn, config) in steps.items():
        fn(config, f"{root}/{name}")
        assert [s.name for s in list_shards(f"{root}/{name}")] == input_shards, name
    consolidate_step(ConsolidateConfig(input=text, filters=(
        DropContaminated(f"{root}/dc"), DropDuplicates(f"{root}/fuzzy"), KeepScore(f"{root}/cls", min_score=0.0),
        KeepHeuristics(f"{root}/heur", rules=(HeuristicRule.C4_CURLY_BRACE,)), RemoveDuplicateSpans(f"{root}/para"))),
        f"{root}/out")
    summary = read_summary(f"{root}/out")
    assert summary["documents"] == read_summary(text)["documents"] == summary["kept"] + sum(summary["removed"].values())
    assert summary["removed"]["contaminated"] == 3 and summary["removed"]["duplicates"] > 0
