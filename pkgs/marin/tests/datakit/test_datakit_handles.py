"""marin.experiment.datakit: handles refuse bad values when built (naming them), resolve their
sources, turn consolidate's filters into the right rules, and the experiment plans."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from marin.cli.main import cli
from marin.execution.core.lazy import lower
from marin.execution.core.placeholders import OutputPath
from marin.execution.core.sources import source
from marin.experiment.data import TokenizeStepConfig, tokenize_step
from marin.experiment.data.sources import DataSourceError
from marin.experiment.data.tokenizer import train_bpe_tokenizer
from marin.experiment.datakit import (
    Classified,
    DedupMethod,
    Extractor,
    FuzzyDedup,
    ParagraphDedup,
    classify,
    consolidate,
    decontaminate,
    dedup,
    heuristics,
    html_to_text,
    keep,
    quality_classifier,
    web_corpus,
)
from marin.processing.attributes import list_shards, read_documents, read_records, read_summary, write_jsonl
from marin.processing.consolidate import (
    DropContaminated,
    DropDuplicates,
    KeepHeuristics,
    KeepScore,
    RemoveDuplicateSpans,
)
from marin.processing.dedup import Grouping, exact_dedup_step, fuzzy_dedup_step
from marin.processing.html import Favor
from testsupport.hashing import hash_over_fixed_sources
from zephyr import DataError

DOCS = "/data/docs"


@pytest.mark.parametrize(("build", "message"), [
    (lambda: dedup("d", DOCS, method="fuzy"),
     "method must be one of 'exact_document', 'exact_paragraph', 'fuzzy', got 'fuzy'"),
    (lambda: dedup("d", DOCS, method="fuzzy", threshold=1.5), r"threshold must be in \(0, 1\), got 1.5"),
    (lambda: dedup("d", DOCS, method="exact_document", threshold=0.9),
     "dedup 'd': threshold=0.9 is not an option of method='exact_document'"),
    (lambda: dedup("d", DOCS, method="fuzzy", min_chars=10), "min_chars=10 is not an option of method='fuzzy'"),
    (lambda: dedup("d", DOCS, grouping="spark"), "grouping must be one of 'in_process', 'zephyr', 'zephyr_workers', got 'spark'"),
    (lambda: dedup("d", 42), "source must be a step handle, a Hugging Face id, or a path.*got int: 42"),
    (lambda: dedup("d", ""), "source must be a step handle.*got str: ''"),
    (lambda: html_to_text("t", DOCS, extractor="beautifulsoup"),
     "extractor must be one of 'trafilatura', 'resiliparse', got 'beautifulsoup'"),
    (lambda: html_to_text("t", DOCS, extractor="resiliparse", favor="precision"),
     "favor='precision' is a trafilatura option"),
    (lambda: html_to_text("t", DOCS, min_chars=-1), "min_chars must be >= 0, got -1"),
    (lambda: heuristics("h", DOCS, rules=["word_count", "vibes"]), "rule must be one of .*got 'vibes'"),
    (lambda: heuristics("h", DOCS, min_wordz=3), "heuristics: unknown option 'min_wordz'"),
    (lambda: quality_classifier("q", DOCS, DOCS, epochs=3), "quality_classifier: unknown option 'epochs'"),
    (lambda: quality_classifier("q", DOCS, None), "negative must be a step handle.*got NoneType"),
    (lambda: decontaminate("c", DOCS, against=[DOCS], threshold=2), r"threshold must be in \[0, 1\], got 2"),
    (lambda: decontaminate("c", DOCS, against=[3]), "an eval set in against must be a step handle.*got int: 3"),
    (lambda: web_corpus("w", num_pages=3), "num_pages must be >= 10, got 3"),
    (lambda: web_corpus("w", pages=30), "web_corpus: unknown option 'pages'"),
])
def test_bad_values_are_refused_when_the_handle_is_built(build: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        build()
    assert "\n" not in str(info.value)


def test_variants_are_typed_and_each_method_is_its_own_step_function() -> None:
    fuzzy = dedup("d/fuzzy", DOCS, "fuzzy", 0.7, ngram=3)
    assert isinstance(fuzzy, FuzzyDedup) and fuzzy.method is DedupMethod.FUZZY
    assert (fuzzy.config.threshold, fuzzy.config.ngram) == (0.7, 3)
    assert dedup("d/f2", DOCS, DedupMethod.FUZZY).config.threshold == 0.8  # 5-word shingles, Jaccard 0.8
    assert dedup("d/f2", DOCS).config.ngram == 5
    para = dedup("d/para", DOCS, method="exact_paragraph", min_chars=20)
    assert isinstance(para, ParagraphDedup) and para.config.min_chars == 20
    exact = dedup("d/exact", DOCS, method="exact_document")
    assert lower(exact).fn is exact_dedup_step and lower(fuzzy).fn is fuzzy_dedup_step
    text = html_to_text("t", DOCS, extractor="resiliparse")
    assert text.config.extractor is Extractor.RESILIPARSE and text.config.favor is Favor.BALANCED
    # Where records are grouped does not change the result, so it does not change the step's hash.
    zephyr = dedup("d/exact", DOCS, method="exact_document", grouping=Grouping.ZEPHYR)
    assert zephyr.config.grouping is Grouping.ZEPHYR
    assert _hash(zephyr) == _hash(exact) != _hash(dedup("d/exact", DOCS + "2", method="exact_document"))


def _hash(handle: Any) -> str:
    return hash_over_fixed_sources(handle)


def test_sources_are_normalised_when_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "docs").mkdir()
    monkeypatch.chdir(tmp_path)
    # Fingerprinted sources; relative paths made absolute (workers run elsewhere).
    assert dedup("d", "docs").config.input == source(str(tmp_path / "docs"))
    assert dedup("d", ["docs", "gs://b/x/*.jsonl"]).config.input == (source(str(tmp_path / "docs")),
                                                                     source("gs://b/x/*.jsonl"))
    corpus = web_corpus("w", num_pages=20)
    text = html_to_text("t", corpus.html)
    assert isinstance(text.config.input, OutputPath) and text.config.input.step is corpus
    assert text.config.input.sub_path == "html"
    fuzzy = dedup("f", text)
    assert fuzzy.config.input is text
    assert dedup("d", "someone/dataset").config.input == source("someone/dataset")  # its commit, at plan time


def _hub_dataset(hub: Path, repo: str, files: dict[str, bytes]) -> Path:
    # The hub cache's own layout: datasets--owner--name/{refs/main, snapshots/<commit>/files}.
    commit = "0123456789abcdef0123456789abcdef01234567"
    folder = hub / ("datasets--" + repo.replace("/", "--"))
    snapshot = folder / "snapshots" / commit
    for name, data in files.items():
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / name).write_bytes(data)
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(commit)
    return snapshot


def test_a_hugging_face_id_is_read_from_the_hub_cache_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rows = [{"id": "a", "text": "The same words here."}, {"id": "b", "text": "the same  words here."},
            {"id": "c", "text": "Something else."}]
    lines = "".join(json.dumps(r) + "\n" for r in rows).encode()
    _hub_dataset(tmp_path / "hub", "someone/webdocs", {"data/train.jsonl": lines, "data/validation.jsonl": lines})
    handle = dedup("dedup/hub", "someone/webdocs", method="exact_document")
    out = tmp_path / "out"
    lower(handle).fn(handle.config, str(out))
    sidecars = list_shards(str(out))
    assert [s.name for s in sidecars] == ["train.jsonl"]  # the train split, named below the snapshot's folder
    attrs = {r["id"]: r["attributes"] for r in read_records(sidecars[0].path)}
    assert [attrs[k]["duplicate"] for k in "abc"] == [False, True, False] and attrs["b"]["representative"] == "a"

    _hub_dataset(tmp_path / "hub", "someone/parquet", {"train.parquet": b"PAR1"})
    with pytest.raises(DataError, match="someone/parquet: the Hugging Face dataset's train files are parquet"):
        exact_dedup_step(dedup("d", "someone/parquet", method="exact_document").config, str(tmp_path / "o2"))
    with pytest.raises(DataSourceError, match="'someone/absent' is a Hugging Face dataset id that is not in the hub cache"):
        exact_dedup_step(dedup("d", "someone/absent", method="exact_document").config, str(tmp_path / "o3"))


def test_consolidate_turns_each_filter_into_its_rule(tmp_path: Path) -> None:
    text = html_to_text("t", web_corpus("w", num_pages=20).html)
    exact = dedup("d/exact", text, method="exact_document")
    fuzzy = dedup("d/fuzzy", text)
    para = dedup("d/para", text, method="exact_paragraph")
    clean = decontaminate("d/clean", text, against={"qa": str(tmp_path)})
    rules = heuristics("d/rules", text)
    scores = classify("d/scores", text, quality_classifier("d/model", positive=str(tmp_path), negative=str(tmp_path)))
    kept = consolidate("d/kept", text, [clean, exact, fuzzy, para, rules, keep(scores, top_fraction=0.5)])
    filters = kept.config.filters
    assert [type(f) for f in filters] == [DropContaminated, DropDuplicates, DropDuplicates, RemoveDuplicateSpans,
                                          KeepHeuristics, KeepScore]
    assert [f.name for f in filters] == ["d/clean", "d/exact", "d/fuzzy", "d/para", "d/rules", "d/scores"]
    assert [f.attributes for f in filters] == [clean, exact, fuzzy, para, rules, scores]
    assert filters[-1].top_fraction == 0.5 and filters[-1].min_score is None
    assert kept.config.input is text

    with pytest.raises(ValueError, match="filter 'd/scores': scores decide nothing alone; give keep"):
        consolidate("k", text, [scores])
    with pytest.raises(ValueError, match="give exactly one of min_score and top_fraction"):
        keep(scores)
    with pytest.raises(ValueError, match="keep\\(...\\) takes a classify\\(...\\) handle, got a FuzzyDedup handle"):
        keep(fuzzy, min_score=0.5)  # type: ignore[arg-type]
    other = dedup("d/other", "/elsewhere/docs")
    with pytest.raises(ValueError, match="filter 'd/other' was built on '/elsewhere/docs', not on the documents "
                                         "consolidated \\('t'\\)"):
        consolidate("k", text, [exact, other])
    with pytest.raises(ValueError, match="filter 'd/exact' is given twice"):
        consolidate("k", text, [exact, exact])
    with pytest.raises(ValueError, match="a consolidate filter is a dedup.*got a WebCorpus handle"):
        consolidate("k", text, [web_corpus("w2", num_pages=20)])
    with pytest.raises(ValueError, match="give at least one filter"):
        consolidate("k", text, [])
    with pytest.raises(ValueError, match="classifier must be a quality_classifier\\(...\\) handle.*got a HtmlText step"):
        classify("s", text, text)
    assert isinstance(classify("s", text, "/models/model.bin"), Classified)


def test_consolidated_output_is_what_tokenized_reads(tmp_path: Path) -> None:
    docs = [{"id": f"d{i}", "text": f"Story {i}: the fox ran over {i} green hills and slept.", "url": None}
            for i in range(12)]
    docs[5]["text"] = docs[2]["text"]  # an exact duplicate of d2
    write_jsonl(str(tmp_path / "docs" / "part-0.jsonl.gz"), docs[:6])
    write_jsonl(str(tmp_path / "docs" / "part-1.jsonl.gz"), docs[6:])
    source = str(tmp_path / "docs")
    exact = dedup("d/exact", source, method="exact_document")
    kept = consolidate("d/kept", source, [exact])
    for handle, out in ((exact, tmp_path / "exact"), (kept, tmp_path / "kept")):
        config = handle.config
        if handle is kept:  # what the runner does: the placeholder becomes the dedup step's output
            config = type(config)(input=source, filters=(DropDuplicates(str(tmp_path / "exact"), name="d/exact"),))
        lower(handle).fn(config, str(out))
    summary = read_summary(str(tmp_path / "kept"))
    assert (summary["documents"], summary["kept"], summary["removed"]) == (12, 11, {"d/exact": 1})
    example = summary["examples"]["d/exact"][0]
    assert example["id"] == "d5" and example["representative"] == {"id": "d2", "snippet": docs[2]["text"]}
    assert [k["id"] for k in summary["kept_examples"]] == ["d0", "d1", "d2", "d3", "d4"]
    assert summary["kept_examples"][0]["notes"] == {"d/exact": "not a duplicate"}

    tokenizer = train_bpe_tokenizer(source, str(tmp_path / "tok"), vocab_size=300, min_frequency=1)
    tokens = tmp_path / "tokens"
    tokenize_step(TokenizeStepConfig(source=str(tmp_path / "kept"), tokenizer=tokenizer, validation_fraction=0.0),
                  str(tokens))
    index = json.loads((tokens / "index.json").read_text())
    assert index["splits"]["train"]["records"] == 11  # every kept document, and not the summary
    kept_ids = [d["id"] for s in list_shards(str(tmp_path / "kept")) for d in read_documents(s.path)]
    assert kept_ids == [d["id"] for d in docs if d["id"] != "d5"]


def test_the_experiment_plans(tmp_path: Path) -> None:
    from experiments.datakit import web_pipeline as exp

    root = Path(__file__).resolve().parents[4]
    result = CliRunner().invoke(cli, ["plan", str(root / "experiments" / "datakit"), "--prefix", str(tmp_path),
                                      "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    steps = {s["name"]: s for s in json.loads(result.stdout)["steps"]}
    assert {"datakit/webcorpus", "datakit/text", "datakit/dedup-exact", "datakit/dedup-fuzzy", "datakit/quality-model",
            "datakit/quality", "datakit/decontaminate", "datakit/kept", "tokenized/datakit-web",
            "checkpoints/datakit-pico", "evals/datakit-pico"} <= set(steps)
    assert {s["action"] for s in steps.values()} == {"run"}
    assert steps["datakit/kept"]["hash"] == _hash(exp.kept) and steps["evals/datakit-pico"]["hash"] == _hash(exp.scores)
    # The graph: tokens read the consolidated documents, which every filter was built beside.
    assert exp.web_tokens.config.source is exp.kept and exp.kept.config.input is exp.text
    assert [f.attributes for f in exp.kept.config.filters] == [exp.clean, exp.exact, exp.fuzzy, exp.quality]
    assert exp.exact.method is DedupMethod.EXACT_DOCUMENT and exp.fuzzy.config.threshold == 0.8
    assert {e.name for e in exp.clean.config.against} == {"qa", "held-out stories"}
    assert exp.text.config.input.step is exp.corpus and exp.text.config.input.sub_path == "html"
