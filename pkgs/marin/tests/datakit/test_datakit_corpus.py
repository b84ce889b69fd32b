"""The generated web corpus: deterministic, and its ground truth is what was planted."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from marin.processing.attributes import list_shards, read_documents
from marin.processing.dedup import jaccard, shingle_set
from marin.processing.webcorpus import BAD_PAGE_KINDS, WebCorpusConfig, generate_web_corpus
from marin.processing.webcorpus.articles import edit_article, make_article, replacements_for, wrap

_CONFIG = WebCorpusConfig(num_pages=120, seed=8, near_duplicate_fraction=0.1, bad_pages_per_kind=1,
                          oversized_bytes=20_000, contaminated_pages=3, eval_items=6)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_same_config_same_bytes(tmp_path: Path) -> None:
    first = generate_web_corpus(str(tmp_path / "a"), _CONFIG)
    second = generate_web_corpus(str(tmp_path / "b"), _CONFIG)
    assert first == second
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    other = generate_web_corpus(str(tmp_path / "c"), WebCorpusConfig(**{**_CONFIG.__dict__, "seed": 9}))
    assert other["pairs"] != first["pairs"]


def test_truth_matches_the_files(tmp_path: Path) -> None:
    truth = generate_web_corpus(str(tmp_path), _CONFIG)
    pages = sorted(str(p.relative_to(tmp_path / "html")) for p in (tmp_path / "html").rglob("*.html"))
    assert len(pages) == truth["pages"] == _CONFIG.num_pages + len(BAD_PAGE_KINDS) * _CONFIG.bad_pages_per_kind
    docs = {d["id"]: d["text"] for s in list_shards(str(tmp_path / "documents")) for d in read_documents(s.path)}
    assert len(docs) == truth["documents"]
    for pair in truth["pairs"]:
        real = jaccard(shingle_set(docs[pair["a"]], 5), shingle_set(docs[pair["b"]], 5))
        assert real == pytest.approx(pair["jaccard"], abs=1e-6)
        if pair["kind"] == "exact":
            assert (tmp_path / "html" / pair["a"]).read_bytes() == (tmp_path / "html" / pair["b"]).read_bytes()
    near = [p for p in truth["pairs"] if p["kind"] == "near" and p["target"] is not None]
    assert near and sum(abs(p["jaccard"] - p["target"]) <= 0.03 for p in near) >= 0.8 * len(near)
    for shop in truth["templated"].values():
        assert shop["max_jaccard"] < 0.78
    assert (tmp_path / "html" / truth["bad_pages"]["empty"][0]).read_bytes() == b""
    assert (tmp_path / "html" / truth["bad_pages"]["oversized"][0]).stat().st_size > _CONFIG.oversized_bytes
    for quote in truth["contaminated"]:
        assert quote["id"] in docs


def test_edits_reach_their_target_similarity() -> None:
    article = make_article(0, 3)
    original = shingle_set(article.text(), 5)
    for target in (0.6, 0.9):
        edited = edit_article(article, replacements_for(target, original.size, 5), 5, random.Random(1))
        assert jaccard(original, shingle_set(edited.text(), 5)) == pytest.approx(target, abs=0.04)
        assert edited.title == article.title and len(edited.paragraphs) == len(article.paragraphs)


def test_wrap_keeps_words_and_width() -> None:
    text = "one two three four five six seven eight nine ten eleven twelve"
    wrapped = wrap(text, 15)
    assert wrapped.split() == text.split()
    assert max(len(line) for line in wrapped.split("\n")) <= 15 and wrapped.count("\n") >= 3


def test_config_names_bad_values() -> None:
    with pytest.raises(ValueError, match="num_pages must be >= 10, got 3"):
        WebCorpusConfig(num_pages=3)
    with pytest.raises(ValueError, match="near_duplicate_jaccards must be values in \\(0, 1\\)"):
        WebCorpusConfig(near_duplicate_jaccards=(1.2,))
