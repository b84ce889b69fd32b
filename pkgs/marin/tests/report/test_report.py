"""``marin report``: data collection, HTML rendering, and the page itself in headless Chromium.

The browser tests open reports of real runs (step processes, the store, provenance): the
hello-world graph, a tokenize-like and a training-like step that write a real ``index.json``
and ``metrics.jsonl``, and a graph with a failing step. The step functions live at module
level here so step workers can import them (by this file's path).

Chromium and its driver come from Debian (``chromium``, ``chromium-driver``); when missing, the
session fixture installs them with apt-get.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from click.testing import CliRunner

from levanter.memory import MEMORY_FILE, MemoryReport
from marin.execution.core.placeholders import output_path_of
from marin.execution.core.step import Step
from marin.execution.run.outcome import RunResult
from marin.execution.run.runner import StepRunner
from marin.report import collect_plan, collect_run, read_metrics, read_tokenized, render_html, write_report
from marin.report.outputs import parse_metrics, read_memory
from marin.report.render import embed_json
from marin.report.run_report import write_run_report
from rigging import filesystem as fs
from testsupport.browser import open_report

HELLO_WORLD = Path(__file__).resolve().parents[4] / "experiments" / "tutorials" / "hello_world.py"
LOGGED_STEPS = 37
# What a trainer on an fsdp=8 mesh measures at start (levanter.memory).
TRAIN_MEMORY = MemoryReport(mesh={"data": 1, "fsdp": 8, "tensor": 1}, params_bytes_per_device=3 * 2**20,
                            params_bytes_total=24 * 2**20, opt_state_bytes_per_device=6 * 2**20,
                            opt_state_bytes_total=48 * 2**20, temp_bytes_per_device=5 * 2**30,
                            step_argument_bytes_per_device=9 * 2**20, step_output_bytes_per_device=9 * 2**20)
EVAL_EVERY = 10

# -- step functions of the test graphs ---------------------------------------------------------


@dataclass(frozen=True)
class FakeTokenizeConfig:
    """A tokenize-like step: how many documents per split and tokens per document."""

    train_documents: int = 120
    validation_documents: int = 12
    tokens_per_document: int = 64
    shards: int = 3
    vocab_size: int = 512


def fake_tokenize(config: FakeTokenizeConfig, output_path: str) -> None:
    """Write shard files and an ``index.json`` in the ``marin.tokenized/v1`` format."""
    splits = {}
    for split, documents in (("train", config.train_documents), ("validation", config.validation_documents)):
        shards = []
        for i in range(config.shards if split == "train" else 1):
            name = f"{split}-{i:05d}.bin"
            fs.atomic_write(fs.join(output_path, name), bytes(config.tokens_per_document))
            shards.append(name)
        splits[split] = {"records": documents, "tokens": documents * config.tokens_per_document, "shards": shards}
    index = {"format": "marin.tokenized/v1", "vocab_size": config.vocab_size, "splits": splits}
    fs.atomic_write(fs.join(output_path, "index.json"), json.dumps(index))


@dataclass(frozen=True)
class FakeTrainConfig:
    """A training-like step: reads the tokenized index, logs ``num_steps`` metric rows."""

    data_path: Any
    num_steps: int = LOGGED_STEPS
    eval_every: int = EVAL_EVERY
    learning_rate: float = 6e-4


def fake_train(config: FakeTrainConfig, output_path: str) -> None:
    """Write ``metrics.jsonl``: a decaying loss, warmup-then-cosine lr, throughput and eval loss."""
    index = json.loads(fs.read_text(fs.join(config.data_path, "index.json")))
    vocab = index["vocab_size"]
    rows = []
    for step in range(1, config.num_steps + 1):
        frac = step / config.num_steps
        warmup = min(1.0, step / 5)
        row = {
            "step": step,
            "loss": math.log(vocab) * (0.35 + 0.65 * math.exp(-4 * frac)) + 0.05 * math.sin(step),
            "lr": config.learning_rate * warmup * 0.5 * (1 + math.cos(math.pi * frac)),
            "tokens_per_s": 4000 + 300 * math.cos(step / 3),
            "grad_norm": 2.0 * math.exp(-2 * frac) + 0.1,
        }
        if step % config.eval_every == 0 or step == config.num_steps:
            row["val_loss"] = row["loss"] + 0.1
        rows.append(json.dumps(row))
    fs.atomic_write(fs.join(output_path, "metrics.jsonl"), "\n".join(rows) + "\n")
    fs.atomic_write(fs.join(output_path, MEMORY_FILE), TRAIN_MEMORY.dumps())
    print(f"trained {config.num_steps} steps", flush=True)


@dataclass(frozen=True)
class BrokenConfig:
    """A step that fails with ``message``."""

    message: str
    upstream: Any = None


def broken_step(config: BrokenConfig, output_path: str) -> None:
    """Print a line to the log, then fail."""
    print("about to fail", flush=True)
    raise ValueError(config.message)


def _hello() -> ModuleType:
    """The hello-world experiment, imported as ``marin run`` imports it."""
    from marin.cli.targets import load_module

    return load_module(str(HELLO_WORLD))


def _graph() -> list[Step]:
    tokenize = Step(name="report-test/tokenized", fn=fake_tokenize, config=FakeTokenizeConfig())
    train = Step(name="report-test/train", fn=fake_train, config=FakeTrainConfig(data_path=output_path_of(tokenize)))
    return [_hello().stats, train]


def _failing_graph() -> list[Step]:
    good = Step(name="fail-test/good", fn=fake_tokenize, config=FakeTokenizeConfig(shards=1))
    bad = Step(name="fail-test/bad", fn=broken_step,
               config=BrokenConfig(message="the bad step failed on purpose", upstream=output_path_of(good)))
    after = Step(name="fail-test/after", fn=broken_step, config=BrokenConfig(message="never", upstream=output_path_of(bad)))
    return [after]


def _runner(prefix: str) -> StepRunner:
    return StepRunner(prefix=prefix, max_parallel=2, strict_env=False)


# -- the browser ---------------------------------------------------------------------------------

def _node(driver: Any, name: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, f'#graph g.node[data-name="{name}"]')


def _vertices(d: str) -> int:
    """How many points an SVG path of M/L commands goes through."""
    return len(re.findall(r"[ML]\s*-?[\d.]+,-?[\d.]+", d))


def _distinct_colours(png: bytes) -> int:
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    return len(image.getcolors(maxcolors=1 << 24) or [])


# -- fixtures: real runs ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, str]:
    """A real run of the hello-world graph plus the tokenize and training-like steps, and its report."""
    prefix = str(tmp_path_factory.mktemp("report-store"))
    runner = _runner(prefix)
    result = runner.run(_graph())
    assert result.ok, [(s.name, s.error) for s in result.steps]
    return result, write_run_report(result, runner.store)


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, str]:
    prefix = str(tmp_path_factory.mktemp("report-failed-store"))
    runner = _runner(prefix)
    result = runner.run(_failing_graph())
    assert not result.ok
    return result, write_run_report(result, runner.store)


# -- browser tests -------------------------------------------------------------------------------


def test_report_of_a_real_run_in_chromium(browser: Any, good_run: tuple[RunResult, str], tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    result, path = good_run
    assert path.startswith(result.prefix) and os.path.exists(path)
    assert os.path.exists(os.path.join(result.prefix, "reports", "latest.html"))
    open_report(browser, path)

    nodes = browser.find_elements(By.CSS_SELECTOR, "#graph g.node")
    names = {n.get_attribute("data-name") for n in nodes}
    assert names == {s.name for s in result.steps} == {
        "hello/numbers", "hello/stats", "report-test/tokenized", "report-test/train"}
    for node in nodes:
        outcome = result.by_name(node.get_attribute("data-name"))
        assert node.get_attribute("data-state") == "ran"
        assert outcome.hash.startswith(node.get_attribute("data-hash"))
        assert node.get_attribute("data-hash") in node.text and node.get_attribute("data-name") in node.text
    assert len(browser.find_elements(By.CSS_SELECTOR, "#graph path.edge")) == 2

    # Clicking a node shows its provenance: resolved config, hash, reason, environment.
    _node(browser, "hello/stats").click()
    panel = browser.find_element(By.ID, "panel")
    assert panel.get_attribute("data-step") == "hello/stats"
    config = panel.find_element(By.CSS_SELECTOR, "pre[data-role=config]").text
    numbers_path = result.by_name("hello/numbers").output_path
    assert json.loads(config) == {"numbers_path": numbers_path + "/numbers.txt"}
    assert result.by_name("hello/stats").hash in panel.text
    assert "hello_world:compute_stats" in panel.text
    assert panel.find_element(By.CSS_SELECTOR, "[data-role=reasons]").text == "new: no earlier build of this name"
    assert "hello/numbers" in panel.find_element(By.CSS_SELECTOR, "ul.deps").text
    assert "python" in panel.text and "uv_lock_sha256" in panel.text

    # The training step: loss, validation loss, lr and tokens/s curves, one point per logged step.
    _node(browser, "report-test/train").click()
    assert panel.get_attribute("data-step") == "report-test/train"
    charts = {c.get_attribute("data-chart") for c in panel.find_elements(By.CSS_SELECTOR, "svg.chart-svg")}
    assert {"loss", "lr", "tokens_per_s"} <= charts
    loss = panel.find_element(By.CSS_SELECTOR, 'path.series[data-series="loss"]')
    assert int(loss.get_attribute("data-points")) >= LOGGED_STEPS
    assert _vertices(loss.get_attribute("d")) >= LOGGED_STEPS
    assert loss.size["width"] > 100 and loss.size["height"] > 20  # drawn, not collapsed
    val = panel.find_element(By.CSS_SELECTOR, 'path.series[data-series="val_loss"]')
    assert int(val.get_attribute("data-points")) == LOGGED_STEPS // EVAL_EVERY + 1
    lr = panel.find_element(By.CSS_SELECTOR, 'path.series[data-series="lr"]')
    assert _vertices(lr.get_attribute("d")) == LOGGED_STEPS
    # The overview section draws the same curves without a click.
    overview = browser.find_element(By.CSS_SELECTOR, '#training-list [data-step="report-test/train"]')
    assert int(overview.find_element(By.CSS_SELECTOR, 'path[data-series="loss"]').get_attribute("data-points")) >= LOGGED_STEPS

    # Per-device memory the trainer measured at start.
    memory = panel.find_element(By.CSS_SELECTOR, "table[data-role=memory]").text
    assert "parameters 3.00 MiB 24.0 MiB" in memory and "optimizer state 6.00 MiB 48.0 MiB" in memory
    assert "step temporaries (peak) 5.00 GiB" in memory
    assert "mesh data=1 × fsdp=8 × tensor=1" in panel.text

    # The tokenize step: documents, tokens and shards.
    _node(browser, "report-test/tokenized").click()
    assert "new: no earlier build of this name" in panel.find_element(By.CSS_SELECTOR, "[data-role=reasons]").text
    stats = panel.find_element(By.CSS_SELECTOR, "table[data-role=tokenized]").text
    assert "120" in stats and "7,680" in stats and "3" in stats and "768" in stats and "validation" in stats

    # The table: every step with state, duration and output size.
    rows = browser.find_elements(By.CSS_SELECTOR, "#steps-table tbody tr[data-name]")
    assert [r.get_attribute("data-name") for r in rows] == [s.name for s in result.steps]
    for row in rows:
        cells = row.find_elements(By.TAG_NAME, "td")
        assert cells[1].text == "ran"
        assert cells[3].text != "–" and cells[4].text != "–"

    png = browser.get_screenshot_as_png()
    (tmp_path / "report.png").write_bytes(png)
    assert _distinct_colours(png) > 50


def test_report_of_a_failed_step_shows_the_error(browser: Any, failed_run: tuple[RunResult, str]) -> None:
    from selenium.webdriver.common.by import By

    result, path = failed_run
    open_report(browser, path)
    states = {n.get_attribute("data-name"): n.get_attribute("data-state")
              for n in browser.find_elements(By.CSS_SELECTOR, "#graph g.node")}
    assert states == {"fail-test/good": "ran", "fail-test/bad": "failed", "fail-test/after": "upstream failed"}
    summary = browser.find_element(By.ID, "summary").text
    assert "1 failed" in summary and "1 upstream failed" in summary
    # The failed step is shown first, with its error and traceback.
    panel = browser.find_element(By.ID, "panel")
    assert panel.get_attribute("data-step") == "fail-test/bad"
    error = panel.find_element(By.CSS_SELECTOR, "[data-role=error]")
    assert "the bad step failed on purpose" in error.text
    assert "ValueError" in error.text and "broken_step" in error.text
    _node(browser, "fail-test/after").click()
    assert "upstream failed: fail-test/bad" in panel.find_element(By.CSS_SELECTOR, "[data-role=error]").text
    row = browser.find_element(By.CSS_SELECTOR, '#steps-table tr[data-name="fail-test/bad"]')
    assert "failed" in row.text and "the bad step failed on purpose" in row.text


def test_plan_report_shows_cached_would_run_and_earlier_failures(
    browser: Any, good_run: tuple[RunResult, str], failed_run: tuple[RunResult, str], tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    result, _ = good_run
    hello_world = _hello()
    changed_numbers = Step(name="hello/numbers", fn=hello_world.write_numbers, config=hello_world.NumbersConfig(n=7))
    changed_stats = Step(name="hello/stats", fn=hello_world.compute_stats,
                         config=hello_world.StatsConfig(numbers_path=output_path_of(changed_numbers, "numbers.txt")))
    runner = _runner(result.prefix)
    plan = runner.plan([changed_stats, *_graph()[1:]])
    page = write_report(collect_plan(plan), str(tmp_path / "plan.html"))
    open_report(browser, page)
    states = {n.get_attribute("data-name"): n.get_attribute("data-state")
              for n in browser.find_elements(By.CSS_SELECTOR, "#graph g.node")}
    assert states == {"hello/numbers": "would run", "hello/stats": "would run",
                      "report-test/tokenized": "cached", "report-test/train": "cached"}
    _node(browser, "hello/numbers").click()
    reasons = browser.find_element(By.CSS_SELECTOR, "#panel [data-role=reasons]").text
    assert "config changed: n: 100 → 7" in reasons
    _node(browser, "hello/stats").click()
    assert "upstream changed: hello/numbers" in browser.find_element(By.CSS_SELECTOR, "#panel [data-role=reasons]").text

    # From the store alone, a step whose last attempt failed shows as failed with its error.
    failed, _ = failed_run
    data = collect_plan(_runner(failed.prefix).plan(_failing_graph()))
    bad = next(s for s in data.steps if s.name == "fail-test/bad")
    assert bad.state.value == "failed" and "failed on purpose" in (bad.error or "")
    assert "about to fail" in (bad.log_tail or "")


# -- the CLI ---------------------------------------------------------------------------------------


def test_a_big_group_is_one_node_with_counts_per_state_until_clicked(browser: Any, tmp_path: Path) -> None:
    """Twelve steps named ``sweep/...`` (three built, nine not) draw as one group node; a click
    expands it into its steps; the table has one row for the group until it is opened."""
    from selenium.webdriver.common.by import By

    from marin.execution.plan.make import make_plan
    from marin.execution.store.store import StepStore

    leaves = [Step(name=f"sweep/leaf{i:02d}", fn=fake_tokenize, config=FakeTokenizeConfig(shards=1, train_documents=i + 1))
              for i in range(12)]
    summary = Step(name="summary/all", fn=fake_train, config=FakeTrainConfig(data_path=output_path_of(leaves[0])))
    prefix = str(tmp_path / "store")
    built = _runner(prefix).run(leaves[:3])
    assert built.ok
    data = collect_plan(make_plan([*leaves, summary], StepStore(prefix)))
    path = write_report(data, str(tmp_path / "report.html"))
    open_report(browser, path)

    group = browser.find_element(By.CSS_SELECTOR, '#graph g.group[data-group="sweep"]')
    assert group.get_attribute("data-count") == "12"
    assert "3 cached" in group.text and "9 would run" in group.text and "sweep/" in group.text
    names = {n.get_attribute("data-name") for n in browser.find_elements(By.CSS_SELECTOR, "#graph g.node")}
    assert names == {"summary/all"}  # the sweep's steps hide in the group node
    row = browser.find_element(By.CSS_SELECTOR, '#steps-table tr.group-row[data-group="sweep"]')
    assert "12 steps" in row.text and row.get_attribute("data-open") == "false"
    assert not browser.find_elements(By.CSS_SELECTOR, '#steps-table tr[data-name^="sweep/"]')

    group.click()
    names = {n.get_attribute("data-name") for n in browser.find_elements(By.CSS_SELECTOR, "#graph g.node")}
    assert names == {"summary/all", *(s.name for s in leaves)}
    assert not browser.find_elements(By.CSS_SELECTOR, "#graph g.group")
    states = {r.get_attribute("data-name"): r.get_attribute("data-state")
              for r in browser.find_elements(By.CSS_SELECTOR, '#steps-table tr[data-name^="sweep/"]')}
    assert len(states) == 12 and sorted(states.values()).count("cached") == 3
    # An edge links the first leaf to the summary step that reads it.
    assert browser.find_elements(By.CSS_SELECTOR, f'#graph path.edge[data-to="{len(leaves)}"]')

    # Collapsing again from the table hides the rows and brings the group node back.
    browser.find_element(By.CSS_SELECTOR, '#steps-table tr.group-row[data-group="sweep"] button').click()
    assert browser.find_element(By.CSS_SELECTOR, '#graph g.group[data-group="sweep"]')
    assert not browser.find_elements(By.CSS_SELECTOR, '#steps-table tr[data-name^="sweep/"]')


def test_the_rows_of_a_group_stay_under_its_header(browser: Any, tmp_path: Path) -> None:
    """Steps of two folders planned alternately: each group's rows follow its own header."""
    from selenium.webdriver.common.by import By

    from marin.execution.plan.make import make_plan
    from marin.execution.store.store import StepStore

    steps = [Step(name=f"{folder}/s{i}", fn=fake_tokenize, config=FakeTokenizeConfig(shards=1, train_documents=i + 1))
             for i in range(2) for folder in ("alpha", "beta")]
    data = collect_plan(make_plan(steps, StepStore(str(tmp_path / "store"))))
    assert [s.name for s in data.steps] == ["alpha/s0", "beta/s0", "alpha/s1", "beta/s1"]
    open_report(browser, write_report(data, str(tmp_path / "report.html")))
    rows = [r.get_attribute("data-group") or r.get_attribute("data-name")
            for r in browser.find_elements(By.CSS_SELECTOR, "#steps-table tbody tr")]
    assert rows == ["alpha", "alpha/s0", "alpha/s1", "beta", "beta/s0", "beta/s1"]


def test_marin_report_cli_writes_a_self_contained_page(good_run: tuple[RunResult, str], tmp_path: Path) -> None:
    from marin.cli.main import cli

    result, _ = good_run
    out = tmp_path / "sub" / "report.html"
    run = CliRunner().invoke(cli, ["report", str(HELLO_WORLD), "--prefix", result.prefix, "-o", str(out)])
    assert run.exit_code == 0, run.output
    assert f"report: {out}" in run.output and "2 cached" in run.output
    page = out.read_text()
    # Self-contained: no external scripts, styles, images or fetches.
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=|https?://(?!www\.w3\.org/2000/svg)", page)
    data = json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S).group(1))
    assert data["source"] == "plan" and data["summary"] == {"cached": 2}
    assert [s["name"] for s in data["steps"]] == ["hello/numbers", "hello/stats"]
    assert all(data["environments"][s["env"]] and s["duration_s"] is not None and s["output_bytes"] > 0
               for s in data["steps"])
    assert [data["groups"][s["group"]] for s in data["steps"]] == ["hello", "hello"]


# -- data collection without a browser --------------------------------------------------------------


def test_collect_run_reads_metrics_tokenized_and_provenance(good_run: tuple[RunResult, str]) -> None:
    result, _ = good_run
    data = collect_run(result)
    by_name = {s.name: s for s in data.steps}
    train = by_name["report-test/train"]
    assert train.metrics is not None and train.metrics["rows"] == LOGGED_STEPS
    assert len(train.metrics["series"]["loss"]) == LOGGED_STEPS
    assert train.deps == [data.steps.index(by_name["report-test/tokenized"])]
    tokenized = by_name["report-test/tokenized"].tokenized
    assert tokenized is not None and tokenized["totals"] == {"documents": 132, "tokens": 132 * 64, "shards": 4}
    assert by_name["hello/numbers"].metrics is None and by_name["hello/numbers"].tokenized is None
    assert train.memory == TRAIN_MEMORY.to_json() and by_name["hello/numbers"].memory is None
    assert all(s.output_bytes and s.duration_s and s.environment for s in data.steps)
    assert data.summary() == {"ran": 4}


def test_a_run_report_from_the_runs_records_equals_one_read_back_from_the_store(
        good_run: tuple[RunResult, str]) -> None:
    result, _ = good_run
    assert all(s.provenance and s.manifest for s in result.steps)  # what the runner just published
    read_back = RunResult(steps=[replace(s, provenance=None, manifest=None) for s in result.steps],
                          prefix=result.prefix, plan=result.plan)
    mine, theirs = collect_run(result).to_json(), collect_run(read_back).to_json()
    mine.pop("generated_at"), theirs.pop("generated_at")
    assert json.dumps(mine, sort_keys=True) == json.dumps(theirs, sort_keys=True)


def test_collect_run_without_a_plan_links_steps_by_provenance(good_run: tuple[RunResult, str]) -> None:
    result, _ = good_run
    bare = RunResult(steps=result.steps, prefix=result.prefix, plan=None)
    data = collect_run(bare)
    names = [s.name for s in data.steps]
    stats = data.steps[names.index("hello/stats")]
    assert [names[d] for d in stats.deps] == ["hello/numbers"]
    assert stats.config == {"numbers_path": result.by_name("hello/numbers").output_path + "/numbers.txt"}


def test_parse_metrics_tolerates_partial_and_non_finite_rows() -> None:
    text = "\n".join([
        json.dumps({"step": 1, "loss": 3.0, "lr": 1e-4}),
        "",
        json.dumps({"step": 2, "loss": float("nan"), "lr": 2e-4}),
        "not json",
        json.dumps({"loss": 1.0}),
        json.dumps({"step": 3, "loss": 2.5, "val_loss": 2.7, "tag": "x", "ok": True}),
        '{"step": 4, "loss": 2.',  # a half-written last line of a running step
    ])
    metrics = parse_metrics(text)
    assert metrics.rows == 3 and metrics.skipped == 3
    assert metrics.series == {"loss": [(1.0, 3.0), (3.0, 2.5)], "val_loss": [(3.0, 2.7)], "lr": [(1.0, 1e-4), (2.0, 2e-4)]}
    assert metrics.last("loss") == (3.0, 2.5) and metrics.last("mfu") is None


def test_readers_return_none_for_missing_or_foreign_files(tmp_path: Path) -> None:
    assert read_metrics(str(tmp_path)) is None
    assert read_tokenized(str(tmp_path)) is None
    assert read_memory(str(tmp_path)) is None
    (tmp_path / MEMORY_FILE).write_text(json.dumps({"format": "levanter.memory/v0"}))
    assert read_memory(str(tmp_path)) is None
    (tmp_path / "metrics.jsonl").write_text("\n\n")
    (tmp_path / "index.json").write_text(json.dumps({"format": "something-else", "splits": {}}))
    assert read_metrics(str(tmp_path)) is None
    assert read_tokenized(str(tmp_path)) is None
    (tmp_path / "index.json").write_text("{broken")
    assert read_tokenized(str(tmp_path)) is None


def test_embedded_json_cannot_close_the_script_element(good_run: tuple[RunResult, str]) -> None:
    text = embed_json({"config": "</script><script>alert(1)</script> & <!--"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"config": "</script><script>alert(1)</script> & <!--"}
    result, _ = good_run
    data = collect_run(result)
    data.steps[0].config = {"note": "</script>"}
    page = render_html(data)
    assert page.count("</script>") == 2  # the JSON element and the code element, nothing else


def test_every_run_outcome_has_a_report_state() -> None:
    from marin.execution.run.outcome import Outcome
    from marin.report.collect import _FROM_OUTCOME

    assert set(_FROM_OUTCOME) == set(Outcome)
