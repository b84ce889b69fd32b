"""``marin browse`` over a real store: its JSON API through urllib against a server on port 0, its
refusals, one Chromium session over its pages, and the CLI in a subprocess.

The store is built by real steps over a few generated web pages: two extractors (trafilatura and
resiliparse), fuzzy dedup, a consolidate filter, a tokenize step with a small byte-level BPE, a
step writing Parquet, and a training-like step whose metrics and whose evaluation's samples are
written as levanter and lm-eval write them (no model is trained).
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from marin.execution.core.placeholders import output_path_of
from marin.execution.core.step import Step
from marin.execution.run.runner import StepRunner
from marin.execution.store.store import StepStore
from marin.experiment.data import tokenized
from marin.experiment.datakit import consolidate, dedup, html_to_text
from marin.report.browse.server import make_server
from marin.report.collect import collect_store
from rigging import filesystem as fs

WORDS = [f"{a}{b}" for a in ("ka", "lo", "mi", "ru", "se", "to", "vi", "ze") for b in ("n", "l", "r", "sk", "mp", "th")]
PAGES = 8
CHANGED = "REPLACED"  # the one word page 7 has instead of page 0's fourth word


def _page(title: str, words: list[str]) -> str:
    paragraphs = "".join(f"<p>{' '.join(words[k:k + 20])}.</p>" for k in range(0, len(words), 20))
    return f"<html><head><title>{title}</title></head><body><article><h1>{title}</h1>{paragraphs}</article></body></html>"


@dataclass(frozen=True)
class TableConfig:
    """Documents with a language and a quality score, written as Parquet."""

    rows: int = 30


def write_table(config: TableConfig, output_path: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    langs = ["en", "en", "fr", "de", "en", "es"]
    table = pa.table({"id": [f"t{i}" for i in range(config.rows)], "text": [f"row {i} " + "word " * i for i in range(config.rows)],
                      "lang": [langs[i % len(langs)] for i in range(config.rows)], "quality": [i / config.rows for i in range(config.rows)]})
    os.makedirs(output_path, exist_ok=True)
    pq.write_table(table, os.path.join(output_path, "part-00000.parquet"))


@dataclass(frozen=True)
class TrainConfig:
    """A training-like step: ``metrics.jsonl`` as levanter's MetricsWriter writes it."""

    data: Any
    steps: int = 30


def write_metrics(config: TrainConfig, output_path: str) -> None:
    rows = [{"step": 0, "run_id": "browse-test", "tags": []}]
    for step in range(1, config.steps + 1):
        rows.append({"step": step, "loss": 5.0 / step ** 0.5, "lr": 1e-3, "grad_norm": 1.0 / step, "tokens_per_s": 900.0 + step,
                     "mfu": 0.01, **({"time_to_first_step_s": 3.0} if step == 1 else {})})
        if step % 10 == 0:
            rows.append({"step": step, "val_loss": 5.5 / step ** 0.5})
            rows.append({"step": step, "story_qa.acc": step / 100, "story_qa.acc_norm": step / 120})
    fs.atomic_write(fs.join(output_path, "metrics.jsonl"), "".join(json.dumps(r) + "\n" for r in rows))


@dataclass(frozen=True)
class EvalConfig:
    """An eval-like step of a model: lm-eval's samples file for one multiple-choice task."""

    model: Any


def write_samples(config: EvalConfig, output_path: str) -> None:
    choices = [" a toy car", " a seed", " a drum"]
    sample = {"doc_id": 0, "doc": {"question": "What did Max have?"}, "target": "0",
              "arguments": {f"gen_args_{k}": {"arg_0": "Max played with his toy car. What did Max have?\nAnswer:", "arg_1": c}
                            for k, c in enumerate(choices)},
              "resps": [[["-3.5", "False"]], [["-2.0", "False"]], [["-4.1", "False"]]],
              "filtered_resps": [["-3.5", "False"], ["-2.0", "False"], ["-4.1", "False"]],
              "filter": "none", "metrics": ["acc"], "acc": 0.0}
    fs.atomic_write(fs.join(output_path, "samples_story_qa.jsonl"), json.dumps(sample) + "\n")


def _pages(folder: Path) -> None:
    rng = random.Random(3)
    texts = [[rng.choice(WORDS) for _ in range(80)] for _ in range(PAGES - 1)]
    near = list(texts[0])
    near[3] = CHANGED
    for k, words in enumerate([*texts, near]):  # the last, a mirror of the first with one word changed
        (folder / f"p{k}.html").write_text(_page(f"Page {k % (PAGES - 1)}", words))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from testsupport.levanter_data import byte_level_tokenizer

    root = tmp_path_factory.mktemp("browse")
    (root / "pages").mkdir()
    _pages(root / "pages")
    tokenizer = root / "tokenizer.json"
    tokenizer.write_text(byte_level_tokenizer([" ".join(WORDS)] * 4, 300))
    text = html_to_text("browse/text", str(root / "pages"), extractor="trafilatura")
    other = html_to_text("browse/text-resiliparse", str(root / "pages"), extractor="resiliparse")
    fuzzy = dedup("browse/fuzzy", text, method="fuzzy", threshold=0.7)
    kept = consolidate("browse/kept", text, [fuzzy])
    tokens = tokenized("browse/tokens", kept, str(tokenizer), validation_fraction=0.0)
    table = Step(name="browse/table", fn=write_table, config=TableConfig())
    model = Step(name="browse/model", fn=write_metrics, config=TrainConfig(data="tokens"))
    evals = Step(name="browse/eval", fn=write_samples, config=EvalConfig(model=output_path_of(model)))
    prefix = str(root / "store")
    result = StepRunner(prefix=prefix, max_parallel=4, strict_env=False).run([other, tokens, evals, table])
    assert result.ok, [(s.name, s.error) for s in result.steps]
    return {"prefix": prefix, "root": root, "out": {s.name: s.output_path[len(prefix) + 1:] for s in result.steps}}


@pytest.fixture(scope="module")
def server(store: dict[str, Any]) -> Iterator[str]:
    the_store = StepStore(store["prefix"])
    srv = make_server(the_store, lambda: collect_store(the_store, title="browse test"), port=0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _get(url: str, **headers: str) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            body = r.read().decode()
            status = r.status
    except urllib.error.HTTPError as e:
        body, status = e.read().decode(), e.code
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def _docs(store: dict[str, Any], name: str) -> dict[str, str]:
    """The documents of a step, read from its shards directly."""
    from marin.processing.attributes import read_records

    folder = Path(store["prefix"]) / store["out"][name]
    return {r["id"]: r["text"] for p in sorted(folder.glob("*.jsonl*")) for r in read_records(str(p))}


# -- the API --------------------------------------------------------------------------------------


def test_documents_page_by_page_from_jsonl_parquet_and_token_shards(server: str, store: dict[str, Any]) -> None:
    out = store["out"]
    status, step = _get(f"{server}/api/step?ref=browse/text")
    assert status == 200 and step["kind"] == "documents" and step["output"] == out["browse/text"]
    docs = _docs(store, "browse/text")
    _, page0 = _get(f"{server}/api/records?ref=browse/text&per=3")
    _, page1 = _get(f"{server}/api/records?ref={out['browse/text']}&per=3&page=1")
    _, last = _get(f"{server}/api/records?ref=browse/text&per=3&page=2")
    shown = page0["records"] + page1["records"] + last["records"]
    assert [r["index"] for r in shown] == list(range(PAGES)) and page1["more"] and not last["more"]
    assert {r["id"]: r["text"] for r in shown} == docs  # every document once, across the step's shards
    _, one = _get(f"{server}/api/records?ref=browse/text&file={shown[4]['file']}")
    assert [r["id"] for r in one["records"]] == [shown[4]["id"]]

    _, table = _get(f"{server}/api/records?ref=browse/table&file=part-00000.parquet&per=5&page=2")
    assert [r["id"] for r in table["records"]] == [f"t{i}" for i in range(10, 15)]
    assert table["records"][0]["fields"] == {"lang": "en", "quality": pytest.approx(10 / 30)}

    _, tok = _get(f"{server}/api/step?ref=browse/tokens")
    assert tok["kind"] == "tokenized"
    _, decoded = _get(f"{server}/api/records?ref=browse/tokens&file=train&per=50")
    kept = set(_docs(store, "browse/kept").values())
    assert decoded["total"] == len(decoded["records"]) == len(kept)
    assert {r["text"] for r in decoded["records"]} == kept  # decoded with the step's tokenizer, byte for byte
    assert all(r["tokens"] > 10 for r in decoded["records"])


def test_attributes_as_histograms(server: str) -> None:
    _, table = _get(f"{server}/api/stats?ref=browse/table")
    hist = table["histograms"]
    assert table["records"] == 30
    assert dict(map(tuple, hist["lang"]["counts"])) == {"en": 15, "fr": 5, "de": 5, "es": 5}
    assert hist["quality"]["kind"] == "numbers" and sum(b[2] for b in hist["quality"]["bins"]) == 30
    assert hist["length (words)"]["min"] == 2 and hist["length (words)"]["max"] == 31
    _, fuzzy = _get(f"{server}/api/stats?ref=browse/fuzzy")
    assert dict(map(tuple, fuzzy["histograms"]["duplicate"]["counts"])) == {"false": PAGES - 1, "true": 1}
    assert fuzzy["histograms"]["jaccard"]["kind"] == "numbers"
    assert "cluster" not in fuzzy["histograms"]  # keys that mostly differ make no histogram


def test_a_dedup_cluster_marks_the_words_that_differ(server: str) -> None:
    _, found = _get(f"{server}/api/clusters?ref=browse/fuzzy")
    assert found["count"] == 1
    cluster = found["clusters"][0]
    assert cluster["size"] == 2 and cluster["representative"] == "p0.html"
    _, shown = _get(f"{server}/api/cluster?ref=browse/fuzzy&cluster={cluster['cluster']}")
    member = shown["members"][0]
    assert member["id"] == "p7.html" and member["jaccard"] >= 0.7
    assert [piece for piece, differs in member["segments"] if differs] == [CHANGED]
    marked = [piece for piece, differs in shown["representative"]["segments"] if differs]
    assert len(marked) == 1 and CHANGED not in marked[0] and marked[0].strip()
    status, error = _get(f"{server}/api/clusters?ref=browse/table")
    assert status == 404 and "no duplicate clusters" in error["error"]


def test_two_steps_side_by_side_joined_by_document_id(server: str) -> None:
    _, extractors = _get(f"{server}/api/join?a=browse/text&b=browse/text-resiliparse")
    counts = extractors["counts"]
    assert counts["a"] == counts["b"] == 0 and counts["same"] + counts["differ"] == PAGES
    _, filtered = _get(f"{server}/api/join?a=browse/text&b=browse/kept&only=a")
    assert filtered["counts"] == {"same": PAGES - 1, "differ": 0, "a": 1, "b": 0}
    assert [r["id"] for r in filtered["rows"]] == ["p7.html"] and filtered["rows"][0]["b"] is None
    _, step = _get(f"{server}/api/step?ref=browse/kept")
    assert step["compare_with"][0].startswith("browse/text-")  # before the filter, suggested


def test_a_training_step_has_its_curves_and_its_evaluations_samples(server: str) -> None:
    status, view = _get(f"{server}/api/training?ref=browse/model")
    assert status == 200
    groups = {g["key"]: g for g in view["metrics"]["groups"]}
    assert list(groups) == ["losses", "optimiser", "throughput", "task:story_qa"]
    assert [s["key"] for s in groups["task:story_qa"]["charts"][0]["series"]] == ["story_qa.acc", "story_qa.acc_norm"]
    (evaluation,) = view["evaluations"]
    assert evaluation["step"] == "browse/eval" and evaluation["task"] == "story_qa"
    choices = evaluation["samples"][0]["choices"]
    assert [c["text"] for c in choices if c["picked"]] == [" a seed"] and [c["text"] for c in choices if c["target"]] == [" a toy car"]


def test_refuses_what_is_outside_the_store_and_writes_nothing(server: str, store: dict[str, Any]) -> None:
    prefix, root = Path(store["prefix"]), store["root"]
    (root / "secret.txt").write_text("not for the browser")
    outside = root / "elsewhere" / "x-0123456789abcdef"
    (outside / ".marin").mkdir(parents=True)
    (prefix / "linked-0123456789abcdef").symlink_to(outside)
    text = store["out"]["browse/text"]
    for url, status, words in [
        (f"/api/step?ref=../{root.name}", 403, "leaves the store"),
        (f"/api/step?ref={outside}", 403, "outside the store"),
        ("/api/step?ref=linked-0123456789abcdef", 403, "outside the store"),
        ("/api/records?ref=browse/text&file=../../secret.txt", 403, "leaves the store"),
        (f"/api/records?ref={text}&file=.marin/provenance.json", 404, "has no file"),
        ("/api/step?ref=browse/nothing-here", 404, "no finished step"),
        ("/api/step", 400, "name a step"),
        ("/api/records?ref=browse/text&file=x&page=two", 400, "whole number"),
    ]:
        got, body = _get(server + url)
        assert got == status and words in body["error"], (url, got, body)
    assert _get(server + "/", Host="evil.example:80")[0] == 403  # a page elsewhere pointed at this port
    request = urllib.request.Request(f"{server}/api/step?ref=browse/text", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 405


# -- the pages in Chromium ------------------------------------------------------------------------


def _ready(driver: Any, timeout_s: float = 20.0) -> None:
    deadline = time.time() + timeout_s
    while driver.execute_script("return document.body && document.body.getAttribute('data-ready')") != "true":
        assert time.time() < deadline, driver.get_log("browser")
        time.sleep(0.05)


def _open_tab(driver: Any, name: str, timeout_s: float = 20.0) -> None:
    """Click a step page's tab ``name`` and wait for its view. The page opens a tab on the hash's change,
    a task after the click: until then ``data-ready`` still speaks for the view before (a clean clone's
    suite once looked for the clusters tab's members in the documents' view)."""
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, f'#tabs a[data-view="{name}"]').click()
    deadline = time.time() + timeout_s
    while driver.execute_script("return document.getElementById('view').getAttribute('data-view')") != name:
        assert time.time() < deadline, driver.get_log("browser")
        time.sleep(0.05)
    _ready(driver, timeout_s)


def test_the_pages_in_chromium(browser: Any, server: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(server + "/")
    _ready(browser)
    nodes = {n.get_attribute("data-name") for n in browser.find_elements(By.CSS_SELECTOR, "#graph g.node")}
    assert {"browse/text", "browse/fuzzy", "browse/tokens", "browse/model", "browse/table"} <= nodes
    browser.find_element(By.CSS_SELECTOR, '#graph g.node[data-name="browse/fuzzy"]').click()
    browser.find_element(By.CSS_SELECTOR, "#panel a[data-role=browse]").click()
    _ready(browser)
    assert browser.find_element(By.ID, "step-name").text == "browse/fuzzy"
    assert browser.find_elements(By.CSS_SELECTOR, "#view .record[data-id]")  # documents with their attributes

    _open_tab(browser, "clusters")
    member = browser.find_element(By.CSS_SELECTOR, '#view article[data-role="member"]')
    assert member.get_attribute("data-id") == "p7.html"
    assert [m.text for m in member.find_elements(By.TAG_NAME, "mark")] == [CHANGED]

    browser.get(server + "/step?ref=browse/kept#compare")
    _ready(browser)
    assert "1 only in browse/text-" in browser.find_element(By.CSS_SELECTOR, "[data-role=counts]").text
    browser.get(server + "/step?ref=browse/table#stats")
    _ready(browser)
    assert {f.get_attribute("data-name") for f in browser.find_elements(By.CSS_SELECTOR, "figure.hist")} >= {"lang", "quality"}
    browser.get(server + "/step?ref=browse/model#curves")
    _ready(browser)
    series = {p.get_attribute("data-series") for p in browser.find_elements(By.CSS_SELECTOR, "path.series")}
    assert series == {"loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "mfu", "story_qa.acc", "story_qa.acc_norm"}
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


# -- the CLI ---------------------------------------------------------------------------------------


def test_marin_browse_prints_its_url_and_serves(store: dict[str, Any]) -> None:
    marin = str(Path(sys.executable).parent / "marin")
    process = subprocess.Popen([marin, "browse", "--prefix", store["prefix"], "--port", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        lines = [process.stdout.readline() for _ in range(2)]  # type: ignore[union-attr]
        url = re.search(r"http://127\.0\.0\.1:\d+/", lines[1])
        assert lines[0].strip() == f"marin browse: {store['prefix']}" and url, lines
        status, page = _get(url.group(0))
        assert status == 200 and 'id="report-data"' in page and "browse/fuzzy" in page
    finally:
        process.terminate()
        process.wait(timeout=10)
