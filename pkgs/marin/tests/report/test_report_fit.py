"""The report's graph fits its panel and every logged metric is a drawn curve (issue 34), in headless
Chromium at 1024, 1440 and 1920 px.

The graph is the nano tutorial's shape (corpus, tokenizer, tokenized, tasks, a model, an eval per
task and their summary), built from trivial steps; the model step logs its metrics through
levanter's own ``MetricsWriter``, as a training run does: losses, optimiser and throughput series,
in-training scores of two evaluation tasks, and values logged once. A plan of 300 steps stands for
``make experiments``: its folders start collapsed and the graph still fits.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from marin.execution.core.placeholders import output_path_of
from marin.execution.core.step import Step
from marin.execution.plan.make import make_plan
from marin.execution.run.runner import StepRunner
from marin.execution.store.store import StepStore
from marin.report import collect_plan, read_metrics, write_report
from marin.report.curves import curve_groups
from rigging import filesystem as fs
from testsupport.browser import open_report

WIDTHS = (1024, 1440, 1920)
TASKS = ("story_qa", "story_place", "story_ending", "story_cloze", "story_text")
TRAIN_STEPS, EVAL_EVERY = 120, 40


@dataclass(frozen=True)
class PartConfig:
    """A step of the test graph: what it reads (placeholders) and a label it writes."""

    label: str
    inputs: tuple[Any, ...] = ()


def write_part(config: PartConfig, output_path: str) -> None:
    fs.atomic_write(fs.join(output_path, "part.txt"), config.label)


def train_like(config: PartConfig, output_path: str) -> None:
    """Log what a training run logs, through levanter's metrics writer."""
    from levanter.metrics import MetricsWriter

    writer = MetricsWriter(output_path, run_id="nano-like")
    for step in range(1, TRAIN_STEPS + 1):
        frac = step / TRAIN_STEPS
        row = {"loss": 7.3 * math.exp(-3 * frac) + 0.6, "lr": 3e-3 * min(1.0, step / 10) * (1 - frac / 2),
               "grad_norm": 0.5 + 0.2 * math.sin(step), "step_time": 0.2 + 0.01 * math.cos(step),
               "tokens_per_s": 18000 + 500 * math.sin(step / 5), "mfu": 0.08 + 0.005 * math.sin(step / 7),
               "input_wait_frac": 0.01}
        if step == 1:
            row["time_to_first_step_s"] = 5.0
        writer.write(step, row)
        if step % EVAL_EVERY == 0:
            writer.write(step, {"val_loss": row["loss"] + 0.1})
            writer.write(step, {"story_qa.acc": 0.25 + step / 1000, "story_qa.acc_norm": 0.22,
                                "story_cloze.acc": 0.3 + step / 2000})
    writer.write(TRAIN_STEPS, {"blocked_in_checkpoint_s": 0.4, "wall_s": 30.0})
    writer.close()


def _nano_shaped() -> list[Step]:
    def part(name: str, *inputs: Step, fn: Any = write_part) -> Step:
        return Step(name=name, fn=fn, config=PartConfig(label=name, inputs=tuple(output_path_of(s) for s in inputs)))

    raw = part("raw/tinystories-synthetic")
    tokenizer = part("tokenizers/marin-bpe-2k", raw)
    tokens = part("tokenized/tinystories-synthetic", raw, tokenizer)
    tasks = part("tasks/story")
    model = part("checkpoints/marin-nano", tokens, tasks, fn=train_like)
    evals = [part(f"evals/checkpoints/marin-nano/{t}", model, tasks) for t in TASKS]
    return [part("evals/marin-nano/story-tasks", *evals)]


def _experiments_shaped() -> list[Step]:
    """300 steps in nested folders, as ``make experiments`` plans them (nothing built)."""
    base = Step(name="tokenized/corpus", fn=write_part, config=PartConfig(label="corpus"))
    out = []
    for i in range(100):
        trial = Step(name=f"sweeps/lr/trial-{i:03d}", fn=write_part, config=PartConfig(f"t{i}", (output_path_of(base),)))
        out.append(Step(name=f"evals/sweeps/lr/trial-{i:03d}", fn=write_part, config=PartConfig(f"e{i}", (output_path_of(trial),))))
    for i in range(97):
        out.append(Step(name=f"scaling/ladder/rung-{i:03d}", fn=write_part, config=PartConfig(f"r{i}", (output_path_of(base),))))
    return [*out, Step(name="reports/all", fn=write_part, config=PartConfig("all", tuple(output_path_of(s) for s in out[:5])))]


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("report-fit")
    runner = StepRunner(prefix=str(root / "store"), max_parallel=4, strict_env=False)
    steps = _nano_shaped()
    result = runner.run(steps)
    assert result.ok, [(s.name, s.error) for s in result.steps]
    nano = write_report(collect_plan(runner.plan(steps)), str(root / "nano.html"))
    big_plan = make_plan(_experiments_shaped(), StepStore(str(root / "empty-store")))
    assert len(big_plan.steps) == 299
    big = write_report(collect_plan(big_plan), str(root / "big.html"))
    return {"nano": nano, "big": big, "model": result.by_name("checkpoints/marin-nano").output_path}


@pytest.fixture
def window(browser: Any) -> Iterator[Any]:
    """The browser; its window is put back to the size the other tests expect afterwards."""
    yield browser
    browser.set_window_size(1440, 1600)


_BOXES = """
const panel = document.getElementById("graph").getBoundingClientRect();
return {panel: [panel.left, panel.top, panel.right, panel.bottom],
        scale: Number(document.getElementById("graph").getAttribute("data-scale")),
        layout: document.getElementById("graph").getAttribute("data-layout"),
        nodes: Array.from(document.querySelectorAll("#graph g.node, #graph g.group")).map(g => {
          const r = g.querySelector("rect.box").getBoundingClientRect();
          return {name: g.getAttribute("data-name") || g.getAttribute("data-group"),
                  label: Array.from(g.querySelectorAll("text.label tspan")).map(t => t.textContent).join(""),
                  box: [r.left, r.top, r.right, r.bottom]};
        })};
"""


def _outside(shown: dict[str, Any]) -> list[str]:
    left, top, right, bottom = shown["panel"]
    return [n["name"] for n in shown["nodes"]
            if n["box"][0] < left - 0.5 or n["box"][1] < top - 0.5 or n["box"][2] > right + 0.5 or n["box"][3] > bottom + 0.5]


def _open_at(driver: Any, page: str, width: int) -> dict[str, Any]:
    driver.set_window_size(width, 1000)
    open_report(driver, page)
    assert abs(driver.execute_script("return window.innerWidth") - width) <= 16
    return driver.execute_script(_BOXES)


def test_the_nano_graph_fits_its_panel_with_whole_labels_at_every_width(window: Any, reports: dict[str, Any]) -> None:
    for width in WIDTHS:
        shown = _open_at(window, reports["nano"], width)
        assert len(shown["nodes"]) == 11, width
        assert _outside(shown) == [], (width, shown)
        assert all(n["label"] == n["name"] for n in shown["nodes"]), shown["nodes"]  # no label cut
        assert shown["scale"] >= 0.9, (width, shown["scale"])  # fitted by its layout, not by shrinking
        assert shown["panel"][2] - shown["panel"][0] >= width - 80  # the graph has the page's width
    assert shown["layout"] == "across"  # 1920 px: a column per layer


def test_a_300_step_graph_starts_collapsed_by_folder_and_fits(window: Any, reports: dict[str, Any]) -> None:
    from selenium.webdriver.common.by import By

    for width in WIDTHS:
        shown = _open_at(window, reports["big"], width)
        assert _outside(shown) == [], width
        assert len(shown["nodes"]) <= 36 and {"sweeps/lr", "evals/sweeps/lr", "scaling/ladder"} <= {
            n["name"] for n in shown["nodes"]}
    # Opening a folder shows its steps, laid out to fit again; zoom and pan move the view.
    window.find_element(By.CSS_SELECTOR, '#graph g.group[data-group="scaling/ladder"]').click()
    shown = window.execute_script(_BOXES)
    assert sum(1 for n in shown["nodes"] if n["name"].startswith("scaling/ladder/")) == 97
    assert _outside(shown) == []
    fitted = shown["scale"]
    window.find_element(By.CSS_SELECTOR, "button[data-zoom=in]").click()
    assert window.execute_script(_BOXES)["scale"] == pytest.approx(fitted * 1.25, rel=1e-3)
    window.find_element(By.CSS_SELECTOR, "button[data-zoom=fit]").click()
    assert window.execute_script(_BOXES)["scale"] == pytest.approx(fitted, rel=1e-3)


def _vertices(d: str) -> int:
    return len(re.findall(r"[ML]\s*-?[\d.]+,-?[\d.]+", d))


def test_every_logged_metric_is_a_drawn_curve_in_its_group(window: Any, reports: dict[str, Any]) -> None:
    metrics = read_metrics(reports["model"])
    assert metrics is not None
    once = {k for k, points in metrics.series.items() if len(points) == 1}
    assert once == {"time_to_first_step_s", "blocked_in_checkpoint_s", "wall_s"}
    for width in WIDTHS:
        window.set_window_size(width, 1000)
        open_report(window, reports["nano"])
        drawn = window.execute_script("""
            const item = document.querySelector('#training-list [data-step="checkpoints/marin-nano"]');
            return {groups: Array.from(item.querySelectorAll(".curve-group")).map(g => g.getAttribute("data-group")),
                    paths: Array.from(item.querySelectorAll("path.series")).map(p => {
                      const r = p.getBoundingClientRect();
                      return [p.getAttribute("data-series"), Number(p.getAttribute("data-points")), p.getAttribute("d"), r.width];
                    }),
                    once: Array.from(item.querySelectorAll("[data-role=logged-once] tr")).map(r => r.getAttribute("data-series"))};
        """)
        assert drawn["groups"] == ["losses", "optimiser", "throughput", "task:story_cloze", "task:story_qa"]
        paths = {key: (n, d, w) for key, n, d, w in drawn["paths"]}
        assert set(paths) == set(metrics.series) - once, width
        for key, (n, d, w) in paths.items():
            assert n == len(metrics.series[key]) == _vertices(d) and w > 20, (width, key)
        assert set(drawn["once"]) == once


def test_the_steps_table_has_one_line_per_row_and_fits_its_card(window: Any, reports: dict[str, Any]) -> None:
    for width in WIDTHS:
        window.set_window_size(width, 1000)
        open_report(window, reports["nano"])
        rows = window.execute_script("""
            const table = document.getElementById("steps-table");
            return {overflow: table.parentElement.scrollWidth - table.parentElement.clientWidth,
                    heights: Array.from(table.querySelectorAll("tbody tr")).map(r => r.getBoundingClientRect().height)};
        """)
        assert rows["overflow"] <= 0, width
        assert len(rows["heights"]) == 11 + 1  # the folder of the five evals has a header row
        assert max(rows["heights"]) < 40, (width, rows["heights"])


def test_curve_groups_name_every_series_once(reports: dict[str, Any]) -> None:
    metrics = read_metrics(reports["model"])
    assert metrics is not None
    groups = {g.key: g for g in curve_groups(metrics)}
    assert [c.series for c in groups["losses"].charts] == [("loss", "val_loss")]
    assert [c.series for c in groups["task:story_qa"].charts] == [("story_qa.acc", "story_qa.acc_norm")]
    assert [c.series for c in groups["optimiser"].charts] == [("lr",), ("grad_norm",)]
    assert set(groups["throughput"].once) == {"time_to_first_step_s", "blocked_in_checkpoint_s", "wall_s"}
    named = [k for g in groups.values() for c in g.charts for k in c.series] + [k for g in groups.values() for k in g.once]
    assert sorted(named) == sorted(metrics.series)
