"""The report of the real nano and hello-world graphs, opened in headless Chromium (issue 7).

The nano graph is the one ``make train-nano`` builds; its first run is shared with
``test_train_nano`` and ``test_ci_cache`` through ``testsupport.e2e.nano_prefix``.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

from testsupport.browser import open_report
from testsupport.e2e import clean_env, marin, nano_prefix, shares_nano_store


def _distinct_colours(png: bytes) -> int:
    from PIL import Image

    return len(Image.open(io.BytesIO(png)).convert("RGB").getcolors(maxcolors=1 << 24) or [])


@shares_nano_store
def test_report_of_the_nano_and_hello_world_graphs(browser: Any, tmp_path_factory: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    prefix, first = nano_prefix(tmp_path_factory)
    assert first.returncode == 0, first.describe()
    env = clean_env(MARIN_PREFIX=str(prefix))
    marin("run", "experiments/tutorials/hello_world.py", env=env)
    page = tmp_path / "report.html"
    marin("report", "experiments/train_nano.py", "experiments/tutorials/hello_world.py", "-o", str(page), env=env)
    html = page.read_text()
    assert "<script src=" not in html and "<link " not in html  # self-contained

    open_report(browser, page, timeout_s=30.0)
    nodes = {n.get_attribute("data-name"): n for n in browser.find_elements(By.CSS_SELECTOR, "#graph g.node")}
    tasks = ("story_qa", "story_place", "story_ending", "story_cloze", "story_text")
    assert set(nodes) == {"raw/tinystories-synthetic", "tokenizers/marin-bpe-2k", "tokenized/tinystories-synthetic",
                          "checkpoints/marin-nano", "hello/numbers", "hello/stats", "tasks/story",
                          *(f"evals/checkpoints/marin-nano/{t}" for t in tasks), "evals/marin-nano/story-tasks"}
    assert {n.get_attribute("data-state") for n in nodes.values()} == {"cached"}
    # The model's story-task scores, a column group per task.
    assert [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#task-table td.task")] == list(tasks)

    nodes["checkpoints/marin-nano"].click()
    panel = browser.find_element(By.ID, "panel")
    assert panel.get_attribute("data-step") == "checkpoints/marin-nano"
    config = json.loads(panel.find_element(By.CSS_SELECTOR, "pre[data-role=config]").text)
    assert config["trainer"]["num_train_steps"] == 400 and config["trainer"]["seq_len"] == 256
    metrics = next(p for p in prefix.glob("checkpoints/marin-nano-*/metrics.jsonl")
                   if re.fullmatch(r"marin-nano-[0-9a-f]{16}", p.parent.name)).read_text().splitlines()
    logged = sum(1 for line in metrics if '"loss"' in line)
    assert logged >= 100
    loss = panel.find_element(By.CSS_SELECTOR, 'path.series[data-series="loss"]')
    assert int(loss.get_attribute("data-points")) >= logged
    assert len(re.findall(r"[ML]\s*-?[\d.]+,-?[\d.]+", loss.get_attribute("d"))) >= logged
    assert loss.size["width"] > 100

    nodes["tokenized/tinystories-synthetic"].click()
    assert panel.find_element(By.CSS_SELECTOR, "table[data-role=tokenized]").text.count("train") >= 1

    png = browser.get_screenshot_as_png()
    (tmp_path / "report.png").write_bytes(png)
    assert _distinct_colours(png) > 50
    try:
        for width in (1024, 1440, 1920):
            _fits_and_draws_every_metric(browser, page, width, metrics)
    finally:
        browser.set_window_size(1440, 1600)


_SHOWN = """
const panel = document.getElementById("graph").getBoundingClientRect();
const item = document.querySelector('#training-list [data-step="checkpoints/marin-nano"]');
return {nodes: Array.from(document.querySelectorAll("#graph g.node")).map(g => {
          const r = g.querySelector("rect.box").getBoundingClientRect();
          return [g.getAttribute("data-name"), Array.from(g.querySelectorAll("text.label tspan")).map(t => t.textContent).join(""),
                  r.left >= panel.left - 0.5 && r.right <= panel.right + 0.5 && r.top >= panel.top - 0.5 && r.bottom <= panel.bottom + 0.5];
        }),
        paths: Object.fromEntries(Array.from(item.querySelectorAll("path.series")).map(
          p => [p.getAttribute("data-series"), Number(p.getAttribute("data-points"))])),
        once: Array.from(item.querySelectorAll("[data-role=logged-once] tr")).map(r => r.getAttribute("data-series"))};
"""


def _fits_and_draws_every_metric(browser: Any, page: Path, width: int, metrics: list[str]) -> None:
    """At ``width`` px: every node inside the fitted graph panel with its whole name, and every series
    of the model's ``metrics.jsonl`` (its in-training story_qa scores too) a drawn curve, or listed
    when it was logged once."""
    browser.set_window_size(width, 1000)
    open_report(browser, page, timeout_s=30.0)
    shown = browser.execute_script(_SHOWN)
    assert len(shown["nodes"]) == 13 and all(label == name and inside for name, label, inside in shown["nodes"]), (width, shown)
    logged: dict[str, int] = {}
    for line in metrics:
        for key, value in json.loads(line).items():
            if key != "step" and isinstance(value, int | float) and not isinstance(value, bool):
                logged[key] = logged.get(key, 0) + 1
    assert {"story_qa.acc", "story_qa.acc_norm"} <= set(shown["paths"])
    assert shown["paths"] == {k: n for k, n in logged.items() if n > 1}, width
    assert set(shown["once"]) == {k for k, n in logged.items() if n == 1}
