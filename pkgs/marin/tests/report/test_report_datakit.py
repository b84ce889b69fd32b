"""The report's data-curation section, from a real run of datakit steps, in headless Chromium: per
filter of a consolidate step its counts, and removed documents beside the one kept (for duplicates,
the representative, with the words that differ marked)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from marin.execution.run.outcome import RunResult
from marin.execution.run.runner import StepRunner
from marin.experiment.datakit import consolidate, decontaminate, dedup
from marin.processing.attributes import read_summary, write_jsonl
from marin.report import collect_run
from marin.report.run_report import write_run_report
from testsupport.browser import open_report

VOCAB = [f"{a}{b}" for a in ("ka", "lo", "mi", "ru", "se", "to", "vi", "ze") for b in ("n", "l", "r", "sk", "mp", "th")]
QUOTE = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa"


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(70))


@pytest.fixture(scope="module")
def curated_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, str, Path]:
    root = tmp_path_factory.mktemp("datakit-report")
    rng = random.Random(5)
    docs = [{"id": f"doc{i}", "text": _text(rng)} for i in range(8)]
    words = docs[0]["text"].split()
    words[3] = "REPLACED"
    docs.append({"id": "near0", "text": " ".join(words)})  # 1 word of 70: Jaccard 61/71 of doc0
    docs.append({"id": "copy1", "text": docs[1]["text"]})
    docs.append({"id": "quoting", "text": _text(rng) + " " + QUOTE})
    write_jsonl(str(root / "docs" / "part-0.jsonl"), docs[:6])
    write_jsonl(str(root / "docs" / "part-1.jsonl"), docs[6:])
    write_jsonl(str(root / "eval.jsonl"), [{"id": "q1", "text": QUOTE}])
    source = str(root / "docs")
    exact = dedup("report-dk/exact", source, method="exact_document")
    fuzzy = dedup("report-dk/fuzzy", source, method="fuzzy", threshold=0.8)
    clean = decontaminate("report-dk/clean", source, against={"qa": str(root / "eval.jsonl")}, ngram=8)
    kept = consolidate("report-dk/kept", source, [clean, exact, fuzzy])
    runner = StepRunner(prefix=str(root / "store"), max_parallel=2, strict_env=False)
    result = runner.run([kept])
    assert result.ok, [(s.name, s.error) for s in result.steps]
    return result, write_run_report(result, runner.store), root


def test_collect_reads_the_consolidate_summary(curated_run: tuple[RunResult, str, Path]) -> None:
    result, _path, _root = curated_run
    steps = {s.name: s for s in collect_run(result).steps}
    data = steps["report-dk/kept"].data
    assert data is not None and data["step"] == "consolidate"
    assert data["counts"]["documents"] == 11 and data["counts"]["kept"] == 8
    assert data["removed"] == {"report-dk/clean": 1, "report-dk/exact": 1, "report-dk/fuzzy": 1}
    assert data["examples"]["report-dk/fuzzy"][0]["representative"]["id"] == "doc0"
    assert steps["report-dk/fuzzy"].data == {"step": "dedup_fuzzy", "counts": {
        k: v for k, v in read_summary(result.by_name("report-dk/fuzzy").output_path).items()
        if isinstance(v, int | float | str) and k != "step"}}
    assert steps["report-dk/fuzzy"].data["counts"]["duplicates"] == 2  # the copy is a near-duplicate too


def test_the_data_section_shows_removed_documents_beside_the_kept_ones(
        browser: Any, curated_run: tuple[RunResult, str, Path], tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    _result, path, _root = curated_run
    open_report(browser, path)
    section = browser.find_element(By.ID, "curation")
    assert section.is_displayed()
    item = section.find_element(By.CSS_SELECTOR, '.curation-item[data-step="report-dk/kept"]')
    assert "11 docs → 8 kept (72.7%)" in item.text
    rows = {r.get_attribute("data-filter"): r.text for r in item.find_elements(By.CSS_SELECTOR, "table[data-role=filters] tr[data-filter]")}
    assert rows == {"report-dk/clean": "report-dk/clean 1 9.1%", "report-dk/exact": "report-dk/exact 1 9.1%",
                    "report-dk/fuzzy": "report-dk/fuzzy 1 9.1%", "": "kept 8 72.7%"}
    segments = item.find_elements(By.CSS_SELECTOR, ".funnel .seg")
    assert len(segments) == 4 and all(s.size["width"] > 0 for s in segments)

    fuzzy = item.find_element(By.CSS_SELECTOR, '.pair[data-filter="report-dk/fuzzy"]')
    removed, kept = fuzzy.find_element(By.CSS_SELECTOR, ".removed"), fuzzy.find_element(By.CSS_SELECTOR, ".kept")
    assert "near0" in removed.text and "duplicate of 'doc0' (Jaccard" in removed.text
    assert "KEPT: REPRESENTATIVE" in kept.text and "doc0" in kept.text
    # Side by side, and only the word that differs is marked on each side.
    assert abs(removed.location["y"] - kept.location["y"]) < 2 and removed.location["x"] < kept.location["x"]
    assert [m.text for m in removed.find_elements(By.TAG_NAME, "mark")] == ["REPLACED"]
    assert len(kept.find_elements(By.TAG_NAME, "mark")) == 1
    exact = item.find_element(By.CSS_SELECTOR, '.pair[data-filter="report-dk/exact"]')
    assert "copy1" in exact.text and "doc1" in exact.text and not exact.find_elements(By.TAG_NAME, "mark")
    clean = item.find_element(By.CSS_SELECTOR, '.pair[data-filter="report-dk/clean"]')
    assert "overlap 1.0 with qa item 'q1'" in clean.find_element(By.CSS_SELECTOR, ".removed").text
    assert "largest overlap 0.0" in clean.find_element(By.CSS_SELECTOR, ".kept").text

    # The panel of a dedup step shows its counts; the table's details column, the consolidation.
    browser.find_element(By.CSS_SELECTOR, '#graph g.node[data-name="report-dk/fuzzy"]').click()
    counts = browser.find_element(By.CSS_SELECTOR, "#panel table[data-role=data-counts]").text
    assert "duplicates 2" in counts and "candidate pairs" in counts
    row = browser.find_element(By.CSS_SELECTOR, '#steps-table tr[data-name="report-dk/kept"]')
    assert "11 docs → 8 kept" in row.text
    section.screenshot(str(tmp_path / "curation.png"))
    assert (tmp_path / "curation.png").stat().st_size > 10_000
