"""Decontamination: quoted eval items found verbatim, re-wrapped and embedded; thresholds 0, 0.5, 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from marin.processing.attributes import list_shards, read_records, read_summary, write_jsonl
from marin.processing.decontaminate import DecontaminateConfig, EvalSet, decontaminate_step
from marin.processing.webcorpus import CONTAMINATION_MODES, WebCorpusConfig, generate_web_corpus
from rigging import filesystem as fs

# 20 words, so 8 distinct 13-grams.
ITEM = ("the quartermaster of the northern garrison counted seventeen barrels of salted herring "
        "before the winter storms closed every mountain pass")


def _attributes(folder: str) -> dict:
    return {r["id"]: r["attributes"] for s in list_shards(folder) for r in read_records(s.path)}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    out = str(tmp_path_factory.mktemp("webcorpus"))
    truth = generate_web_corpus(out, WebCorpusConfig(num_pages=150, seed=2, bad_pages_per_kind=0,
                                                     contaminated_pages=12, eval_items=40))
    return out, truth


def test_quoted_items_are_found_in_every_form_and_clean_text_is_clean(corpus: tuple[str, dict], tmp_path: Path) -> None:
    root, truth = corpus
    out = str(tmp_path / "dc")
    decontaminate_step(DecontaminateConfig(input=f"{root}/documents",
                                           against=(EvalSet("qa", f"{root}/eval/items.jsonl"),)), out)
    attrs = _attributes(out)
    planted = {c["id"]: c for c in truth["contaminated"]}
    assert {c["mode"] for c in planted.values()} == set(CONTAMINATION_MODES)
    for doc, expected in planted.items():
        assert attrs[doc]["contaminated"] and attrs[doc]["item"] == expected["item"], (doc, expected["mode"])
        assert attrs[doc]["overlap"] == 1.0 and attrs[doc]["eval_set"] == "qa"
    # Nothing else shares even one 13-gram with an eval item.
    assert all(a["overlap"] == 0 and not a["contaminated"] for doc, a in attrs.items() if doc not in planted)
    summary = read_summary(out)
    assert summary["contaminated"] == len(planted)
    assert summary["matrix"] == {"all": {"qa": len(planted)}}
    assert summary["eval_sets"]["qa"]["items_found"] == len({c["item"] for c in planted.values()})


@pytest.mark.parametrize(("threshold", "expected"), [
    (0.0, {"full", "half", "one_gram", "wrapped"}),
    (0.5, {"full", "half", "wrapped"}),
    (1.0, {"full", "wrapped"}),
])
def test_threshold_is_honoured_exactly(tmp_path: Path, threshold: float, expected: set[str]) -> None:
    words = ITEM.split()
    filler = "a quiet afternoon passed in the village while people went about their usual business"
    docs = [
        {"id": "full", "text": f"{filler}. {ITEM}. {filler}."},
        {"id": "wrapped", "text": "\n".join(" ".join(words[i:i + 3]) for i in range(0, len(words), 3)).upper()},
        # Words 0..16 give 5 of the 8 n-grams: overlap 0.625 (>= 0.5, < 1).
        {"id": "half", "text": f"{filler} " + " ".join(words[:17])},
        # Exactly one 13-gram: overlap 1/8 (> 0, < 0.5).
        {"id": "one_gram", "text": " ".join(words[:13]) + f", said nobody. {filler}"},
        {"id": "twelve", "text": " ".join(words[:12]) + f". {filler}"},
        {"id": "clean", "text": filler},
    ]
    write_jsonl(str(tmp_path / "docs" / "part-0.jsonl"), docs)
    write_jsonl(str(tmp_path / "eval" / "items.jsonl"), [{"id": "item-1", "text": ITEM}])
    out = str(tmp_path / f"dc-{threshold}")
    decontaminate_step(DecontaminateConfig(input=str(tmp_path / "docs"), threshold=threshold,
                                           against=(EvalSet("set", str(tmp_path / "eval")),)), out)
    attrs = _attributes(out)
    assert {doc for doc, a in attrs.items() if a["contaminated"]} == expected
    assert attrs["half"]["overlap"] == 0.625 and attrs["one_gram"]["overlap"] == 0.125
    assert attrs["twelve"]["overlap"] == 0.0 and attrs["clean"]["eval_set"] is None


def test_short_items_lm_eval_fields_text_files_and_the_matrix(tmp_path: Path) -> None:
    # lm-eval style documents: the item is question and answer joined.
    write_jsonl(str(tmp_path / "lm" / "test.jsonl"), [
        {"doc_id": 7, "question": "Which river flows through the city of Zentrix?", "answer": "the Morwick"},
        {"doc_id": 8, "question": "Name", "answer": "it"},
    ])
    fs.atomic_write(str(tmp_path / "txt" / "items.txt"), "a line of plain text eval item that is fairly long here\n")
    docs = [
        {"id": 1, "source": "forum", "text": "Quiz: which river flows through the city of Zentrix? The Morwick, of course."},
        {"id": 2, "source": "news", "text": "Which river flows through the city? Nobody knew."},
        {"id": 3, "text": "copied: A line of plain text eval item that is fairly long here!"},
    ]
    write_jsonl(str(tmp_path / "docs" / "web" / "part-0.jsonl"), docs)
    out = str(tmp_path / "dc")
    decontaminate_step(DecontaminateConfig(input=str(tmp_path / "docs"), against=(
        EvalSet("lm", str(tmp_path / "lm"), fields=("question", "answer"), id_field="doc_id"),
        EvalSet("plain", str(tmp_path / "txt")))), out)
    attrs = _attributes(out)
    # A 10-word item is one "n-gram" of all its words: found where the whole run occurs.
    assert attrs[1]["contaminated"] and attrs[1]["item"] == "7" and attrs[1]["eval_set"] == "lm"
    assert not attrs[2]["contaminated"]
    assert attrs[3]["contaminated"] and attrs[3]["item"] == "items.txt:1"
    summary = read_summary(out)
    # Rows: the document's source field, else its shard's folder.
    assert summary["matrix"] == {"forum": {"lm": 1, "plain": 0}, "web": {"lm": 0, "plain": 1}}
    assert summary["eval_sets"]["lm"] == {"items": 2, "items_used": 1, "too_short": 1, "items_found": 1}


def test_config_names_bad_values() -> None:
    with pytest.raises(ValueError, match="threshold must be in \\[0, 1\\], got 1.5"):
        DecontaminateConfig(input="x", against=(EvalSet("a", "y"),), threshold=1.5)
    with pytest.raises(ValueError, match="eval set names must be distinct"):
        DecontaminateConfig(input="x", against=(EvalSet("a", "y"), EvalSet("a", "z")))
    with pytest.raises(ValueError, match="against must name at least one eval set"):
        DecontaminateConfig(input="x", against=())
