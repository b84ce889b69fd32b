"""``dedup(..., keep=...)``: which copy of a group of duplicates is its representative (the first in
source order, the longest, a priority of id patterns, a function of the record), for exact and
near-duplicate documents on a tiny JSON-lines corpus, and how the rule enters a step's identity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from marin.experiment.datakit import dedup, web_corpus
from marin.processing.attributes import list_shards, read_records, read_summary
from marin.processing.dedup import (
    ExactDedupConfig,
    FuzzyDedupConfig,
    Keep,
    exact_dedup_step,
    fuzzy_dedup_step,
)

MANUAL = ("Valgrind is an instrumentation framework for building dynamic analysis tools. It can detect memory "
          "errors and threading bugs automatically, and profile programs in detail.")
# In source order: a mirror's copy first, the originals after it in a later file.
CORPUS = {
    "a.jsonl": [
        {"id": "valgrind-mirror/manual.html", "text": MANUAL, "date": "2019-01-01"},
        {"id": "blog/tomatoes", "text": "Completely different words make up this page about growing tomatoes "
                                        "in a small backyard plot during a dry summer.", "date": "2024-06-01"},
    ],
    "b.jsonl": [
        # A near-duplicate (one sentence more: Jaccard 0.8 of 5-word shingles) and the longest text.
        {"id": "valgrind/manual.html", "text": MANUAL + " See the manual for more.", "date": "2021-03-01"},
        # An exact duplicate of the mirror's copy (equal once whitespace is normalised), one character longer.
        {"id": "valgrind/copy.html", "text": MANUAL.replace("is an", "is  an"), "date": "2023-05-01"},
    ],
}


def newest(doc: dict[str, Any]) -> str:
    """A keep function: the latest ``date`` wins."""
    return doc["date"]


def oldest(doc: dict[str, Any]) -> str:
    return "".join(chr(0x10FFFF - ord(c)) for c in doc["date"])


def _corpus(tmp_path: Path) -> str:
    folder = tmp_path / "in"
    folder.mkdir()
    for name, docs in CORPUS.items():
        (folder / name).write_text("".join(json.dumps(d) + "\n" for d in docs))
    return str(folder)


def _attributes(folder: Path) -> dict[Any, dict]:
    return {r["id"]: r["attributes"] for s in list_shards(str(folder)) for r in read_records(s.path)}


@pytest.mark.parametrize(("keep", "near", "exact"), [
    (Keep.FIRST, "valgrind-mirror/manual.html", "valgrind-mirror/manual.html"),
    (Keep.LONGEST, "valgrind/manual.html", "valgrind/copy.html"),
    (("valgrind/*",), "valgrind/manual.html", "valgrind/copy.html"),  # both match: the first of them
    (("blog/*", "*-mirror/*"), "valgrind-mirror/manual.html", "valgrind-mirror/manual.html"),
    (newest, "valgrind/copy.html", "valgrind/copy.html"),
], ids=["first", "longest", "patterns", "patterns-in-order", "function"])
def test_keep_chooses_the_representative(tmp_path: Path, keep: Any, near: str, exact: str) -> None:
    source = _corpus(tmp_path)
    fuzzy_dedup_step(FuzzyDedupConfig(input=source, threshold=0.7, keep=keep), str(tmp_path / "near"))
    attrs = _attributes(tmp_path / "near")
    cluster = ["valgrind-mirror/manual.html", "valgrind/manual.html", "valgrind/copy.html"]
    assert {doc_id: attrs[doc_id]["representative"] for doc_id in cluster} == dict.fromkeys(cluster, near)
    assert [doc_id for doc_id in cluster if not attrs[doc_id]["duplicate"]] == [near]
    assert len({attrs[doc_id]["cluster"] for doc_id in cluster}) == 1
    # Each copy's Jaccard is to the representative (1.0 for the copies equal in words to it).
    assert attrs[near]["jaccard"] is None and all(0.7 <= attrs[d]["jaccard"] <= 1 for d in cluster if d != near)
    assert attrs["blog/tomatoes"] == {"duplicate": False, "cluster": attrs["blog/tomatoes"]["cluster"],
                                      "representative": "blog/tomatoes", "jaccard": None}
    assert read_summary(str(tmp_path / "near"))["duplicates"] == 2

    exact_dedup_step(ExactDedupConfig(input=source, keep=keep), str(tmp_path / "exact"))
    attrs = _attributes(tmp_path / "exact")
    pair = ["valgrind-mirror/manual.html", "valgrind/copy.html"]
    assert {doc_id: attrs[doc_id]["representative"] for doc_id in pair} == dict.fromkeys(pair, exact)
    assert [doc_id for doc_id in pair if not attrs[doc_id]["duplicate"]] == [exact]
    assert not attrs["valgrind/manual.html"]["duplicate"] and not attrs["blog/tomatoes"]["duplicate"]
    assert read_summary(str(tmp_path / "exact"))["examples"] == [
        {"id": next(d for d in pair if d != exact), "representative": exact}]


def test_keep_enters_the_identity_only_when_it_is_not_first() -> None:
    documents = web_corpus("raw/webcorpus", num_pages=50, seed=1).documents

    def digest(method: str, **keep: Any) -> str:
        return dedup(f"d/{method.split('_')[0]}", documents, method=method, **keep).lower().hash

    # Pinned: the hashes these steps had before keep existed.
    assert digest("fuzzy") == digest("fuzzy", keep="first") == digest("fuzzy", keep=Keep.FIRST) == \
        "71e0b7d5542515dd31c0d165bc762a79efb3417b14a7933f614333edc66d36d2"
    assert digest("exact_document") == digest("exact_document", keep="first") == \
        "3049abcf4a1cec0be28ea4b934b97fb436cdb5797bc391bc80acded8b5b948e5"
    rules: list[Any] = ["longest", ["valgrind/*"], ["valgrind/*", "blog/*"], newest, oldest]
    for method in ("fuzzy", "exact_document"):
        assert len({digest(method), *(digest(method, keep=rule) for rule in rules)}) == 1 + len(rules)
        # A function is held by its name (module:qualname), as every function in a config.
        assert digest(method, keep=newest) == digest(method, keep=newest)
        assert digest(method, keep=["valgrind/*"]) == digest(method, keep=("valgrind/*",))


@pytest.mark.parametrize(("keep", "message"), [
    ("shortest", r"dedup 'd/x': keep='shortest' is neither 'first' nor 'longest'; a priority of id patterns is "
                 r"a list: dedup 'd/x': keep=\['shortest'\]"),
    ([], "a priority of id patterns must be a non-empty list of non-empty strings"),
    (lambda doc: len(doc["text"]), "must be defined at the top level of a module"),
    (3, "keep must be 'first', 'longest', a list of id patterns or a function of the record, got int: 3"),
])
def test_a_bad_keep_is_refused_when_the_handle_is_built(tmp_path: Path, keep: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dedup("d/x", _corpus(tmp_path), keep=keep)


def test_keep_is_refused_for_paragraphs_and_a_config_holds_its_canonical_form(tmp_path: Path) -> None:
    source = _corpus(tmp_path)
    with pytest.raises(ValueError, match="dedup 'd/p': keep='longest' is not an option of method='exact_paragraph'"):
        dedup("d/p", source, method="exact_paragraph", keep="longest")
    assert dedup("d/p", source, method="exact_paragraph", keep="first").name == "d/p"
    with pytest.raises(ValueError, match="a config holds a Keep or a tuple"):
        FuzzyDedupConfig(input=source, keep="longest")


def test_values_a_keep_function_cannot_compare_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot be compared: '2019-01-01' and 3"):
        exact_dedup_step(ExactDedupConfig(input=_corpus(tmp_path), keep=date_or_number), str(tmp_path / "out"))


def date_or_number(doc: dict[str, Any]) -> Any:
    return 3 if doc["id"].startswith("valgrind/") else doc["date"]
