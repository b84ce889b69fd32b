"""Quality: a real fastText classifier trained and applied, and the Gopher, C4 and FineWeb heuristic rules."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from marin.experiment.data.corpus import generate_story
from marin.processing.attributes import list_shards, read_records, read_summary, write_jsonl
from marin.processing.quality import (
    C4_RULES,
    FINEWEB_RULES,
    GOPHER_RULES,
    MODEL_FILE,
    ClassifyConfig,
    HeuristicRule,
    HeuristicsConfig,
    QualityClassifierConfig,
    classify_step,
    evaluate_heuristics,
    fineweb_metrics,
    fineweb_words,
    heuristics_step,
    quality_classifier_step,
)

_SPAM = ("buy", "cheap", "pills", "click", "here", "best", "price", "free", "casino", "bonus", "win", "now",
         "limited", "offer", "deal", "discount", "viagra", "loans", "fast", "cash")


def _spam(rng: random.Random) -> str:
    return " ".join(rng.choice(_SPAM) for _ in range(rng.randint(30, 80))) + " !!!"


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("quality")
    rng = random.Random(0)
    for k in range(2):
        write_jsonl(str(root / "good" / f"part-{k}.jsonl"),
                    [{"id": f"g{k}-{i}", "text": generate_story(7, k * 200 + i)} for i in range(200)])
        write_jsonl(str(root / "bad" / f"part-{k}.jsonl"), [{"id": f"b{k}-{i}", "text": _spam(rng)} for i in range(200)])
    return str(root / "good"), str(root / "bad")


def _config(good: str, bad: str) -> QualityClassifierConfig:
    return QualityClassifierConfig(positive=good, negative=bad, dim=16, bucket=20_000, epoch=10, lr=0.2, seed=1)


def test_classifier_trains_reproducibly_and_scores_documents(sources: tuple[str, str], tmp_path: Path) -> None:
    good, bad = sources
    quality_classifier_step(_config(good, bad), str(tmp_path / "m1"))
    quality_classifier_step(_config(good, bad), str(tmp_path / "m2"))
    model = (tmp_path / "m1" / MODEL_FILE).read_bytes()
    # Seeded, one thread, shuffled with the seed: the same model, byte for byte.
    assert model == (tmp_path / "m2" / MODEL_FILE).read_bytes()
    summary = read_summary(str(tmp_path / "m1"))
    validation = summary["validation"]
    assert validation["positive"] > 10 and validation["negative"] > 10
    assert validation["precision"] >= 0.95 and validation["recall"] >= 0.95 and validation["f1"] >= 0.95
    assert summary["train"]["positive"] + validation["positive"] == 400

    mixed = tmp_path / "mixed"
    rng = random.Random(9)
    docs = [{"id": f"s{i}", "text": generate_story(11, i)} for i in range(20)] + \
           [{"id": f"x{i}", "text": _spam(rng)} for i in range(20)]
    write_jsonl(str(mixed / "a.jsonl"), docs[::2])
    write_jsonl(str(mixed / "b.jsonl"), docs[1::2])
    classify_step(ClassifyConfig(input=str(mixed), model=str(tmp_path / "m1")), str(tmp_path / "scores"))
    scores = {r["id"]: r["attributes"]["score"] for s in list_shards(str(tmp_path / "scores")) for r in read_records(s.path)}
    assert sorted(scores) == sorted(d["id"] for d in docs)
    assert min(v for k, v in scores.items() if k.startswith("s")) > 0.8
    assert max(v for k, v in scores.items() if k.startswith("x")) < 0.2
    assert read_summary(str(tmp_path / "scores"))["documents"] == 40


def test_classify_names_a_missing_model(sources: tuple[str, str], tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no fastText model at"):
        classify_step(ClassifyConfig(input=sources[0], model=str(tmp_path / "nothing")), str(tmp_path / "out"))


_GOOD = ("The river ran past the old mill and the children walked to the water with their dog. "
         "They talked about the boats, the birds and the weather, and they shared the bread that was in the basket. ")


def _failed(text: str, **overrides) -> list[str]:
    return evaluate_heuristics(text, HeuristicsConfig(input="", **overrides))["failed"]


@pytest.mark.parametrize(("text", "rule"), [
    ("Too short to be a page.", "word_count"),
    ("a b c d e f g h " * 20, "mean_word_length"),
    (_GOOD * 2 + " ".join(["#tag"] * 20), "symbol_ratio"),
    ("\n".join(f"- item {i} of the list and the rest with it" for i in range(30)), "bullet_lines"),
    ("\n".join(f"Line {i} goes on and on with the story..." for i in range(30)), "ellipsis_lines"),
    (_GOOD + " ".join(["12345"] * 60), "alpha_words"),
    ("Cats sleep. Dogs bark loudly. " * 20, "stop_words"),
    ("\n".join(["Same line over and over again, the end."] * 10 + [_GOOD]), "duplicate_lines"),
    ("\n\n".join(["A paragraph that repeats with the same words in it."] * 6 + [_GOOD]), "duplicate_paragraphs"),
    ("the cat " * 80, "top_ngram"),
    (_GOOD * 3, "duplicate_ngram"),
    ("\n".join(["menu", "home", "contact us", "short line"] * 10) + "\n" + _GOOD, "c4_kept_lines"),
    ("This is one sentence that is quite long and has no end mark at all, it just goes on and on " * 4 + "the end.", "c4_sentences"),
    (_GOOD + "Lorem ipsum dolor sit amet.", "c4_lorem_ipsum"),
    (_GOOD + "function f() { return 1; }", "c4_curly_brace"),
])
def test_each_rule_fails_the_text_made_to_fail_it(text: str, rule: str) -> None:
    assert rule in _failed(text)


def test_clean_prose_passes_and_rules_can_be_chosen(tmp_path: Path) -> None:
    prose = "\n".join(generate_story(3, i) for i in range(6))
    result = evaluate_heuristics(prose, HeuristicsConfig(input=""))
    assert result["failed"] == [] and result["passed"] is True
    assert result["metrics"]["stop_words"] >= 2 and result["metrics"]["word_count"] > 50
    # Only the chosen rules decide `passed`.
    assert _failed("Too short.", rules=(HeuristicRule.C4_LOREM_IPSUM,)) == []
    write_jsonl(str(tmp_path / "in" / "d.jsonl"), [{"id": 1, "text": prose}, {"id": 2, "text": "Too short."}])
    heuristics_step(HeuristicsConfig(input=str(tmp_path / "in")), str(tmp_path / "out"))
    summary = read_summary(str(tmp_path / "out"))
    assert (summary["documents"], summary["passed"]) == (2, 1) and summary["failures"]["word_count"] == 1
    with pytest.raises(ValueError, match="max_symbol_ratio must be in \\[0, 1\\], got 2"):
        HeuristicsConfig(input="", max_symbol_ratio=2)


def _line(i: int) -> str:
    """A unique line of 40 characters without an ending punctuation mark."""
    return f"line number {i:04d} of the page and its text"[:40].ljust(40, "x")


def _doc_chars(repeated: int) -> str:
    """1,000 characters without newlines; the last ``repeated`` repeat the start of the first line."""
    lines = [f"{i:03d} " + "w" * 96 for i in range(10)]  # 10 unique lines of 100 characters
    if repeated:
        lines[-1] = lines[-1][:100 - repeated]
        lines.append(lines[0][:repeated])
        lines.insert(1, lines[0][:repeated])  # the same short line, first met before the repeat
        lines[2] = lines[2][:100 - repeated]
    return "\n".join(lines)


# Each FineWeb rule at its published threshold (datatrove's FineWebQualityFilter): at the bar the
# document passes, one step past it fails.
@pytest.mark.parametrize(("rule", "passing", "failing"), [
    ("fineweb_line_punctuation",  # >= 0.12 of the lines end in a sentence terminal
     "\n".join([_line(i) + "." for i in range(3)] + [_line(i) for i in range(3, 25)]),
     "\n".join([_line(i) + "!" for i in range(2)] + [_line(i) for i in range(2, 25)])),
    ("fineweb_short_lines",  # <= 0.67 of the lines have at most 30 characters
     "\n".join([f"short line {i:03d}".ljust(30, ".") for i in range(67)] + [_line(i) + "." for i in range(33)]),
     "\n".join([f"short line {i:03d}".ljust(30, ".") for i in range(68)] + [_line(i) + "." for i in range(32)])),
    ("fineweb_duplicate_line_chars",  # <= 0.01 of the characters in lines equal to an earlier one
     _doc_chars(10), _doc_chars(11)),
    ("fineweb_list_like",  # <= 0.3 newlines per word
     "one two three\nfour five\nsix seven\neight nine ten", "one two three\nfour five\nsix seven\neight nine\nten"),
], ids=lambda value: value if isinstance(value, str) and value.startswith("fineweb_") else "")
def test_each_fineweb_rule_at_its_published_threshold(rule: str, passing: str, failing: str) -> None:
    config = HeuristicsConfig(input="", rules=(HeuristicRule(rule),))
    assert evaluate_heuristics(passing, config)["failed"] == []
    assert evaluate_heuristics(failing, config)["failed"] == [rule]


def test_fineweb_metrics_count_as_datatrove_does_and_only_when_asked() -> None:
    page = "Home\nAbout us\nShop\nHome\nThe story of the mill, told by the miller's daughter (1923)."
    metrics = fineweb_metrics(page)
    assert metrics["line_punctuation"] == 0.2 and metrics["short_lines"] == 0.8
    assert metrics["duplicate_line_chars"] == 4 / (len(page) - 4)  # the second "Home" over the text without newlines
    words = fineweb_words("Don't stop -- it's \"well-known\" that prices (3.50) rose 5%... Really?!")
    assert words == ["Don", "'t", "stop", "--", "it", "'s", '"', "well-known", '"', "that", "prices", "(", "3.50", ")",
                     "rose", "5", "%", "...", "Really", "?", "!"]
    assert fineweb_metrics("Ceci est une phrase.\n这是一个句子。\nहिंदी वाक्य।")["line_punctuation"] == 1.0
    # Not among the rules: not measured (the default rules, and so the default outputs, are Gopher's and C4's).
    assert "fineweb" not in evaluate_heuristics(page, HeuristicsConfig(input=""))["metrics"]
    assert HeuristicsConfig(input="").rules == GOPHER_RULES + C4_RULES and len(FINEWEB_RULES) == 4
    with pytest.raises(ValueError, match="fineweb_max_short_lines must be in \\[0, 1\\], got 67"):
        HeuristicsConfig(input="", fineweb_max_short_lines=67)
