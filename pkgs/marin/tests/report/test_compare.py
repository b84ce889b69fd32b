"""``marin compare`` and the report's comparison: differing config fields as columns beside results."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from levanter.optim import AdamConfig
from marin.cli.main import cli
from marin.report import collect_plan, write_report
from marin.report.compare import compare_plan
from testsupport.browser import open_report
from testsupport.lm_graph import copy_prefix, runner, tiny_model

EXPERIMENT = '''\
from levanter.optim import AdamConfig
from testsupport.lm_graph import data, held_out, tiny_model
from marin.experiment.evaluation.eval import evaluate

slow = tiny_model("checkpoints/slow", steps=10, optimizer=AdamConfig(learning_rate=1e-3, warmup=2, schedule="constant"))
fast = tiny_model("checkpoints/fast", steps=20, optimizer=AdamConfig(learning_rate=1e-2, warmup=2, schedule="constant"))
steps = [evaluate("evals/" + m.name.split("/")[1], m, {"held-out": held_out, "tiny": data}) for m in (slow, fast)]
'''


@pytest.fixture(scope="module")
def built(tmp_path_factory, lm_data_prefix: Path) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("compare")
    prefix = copy_prefix(lm_data_prefix, root / "store")
    experiment = root / "sweep.py"
    experiment.write_text(EXPERIMENT)
    from marin.cli.targets import load_targets

    result = runner(prefix).run(load_targets([str(experiment)]))
    assert result.ok, [(s.name, s.error) for s in result.failed]
    return prefix, experiment


def _compare(built: tuple[Path, Path], *args: str) -> str:
    prefix, experiment = built
    result = CliRunner().invoke(cli, ["compare", str(experiment), "--prefix", str(prefix), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_compare_shows_the_differing_fields_as_columns_beside_results(built):
    rows = list(csv.reader(io.StringIO(_compare(built, "--format", "csv", "--sort", "held-out.bpb"))))
    header, body = rows[0], rows[1:]
    # Only what differs between the two runs becomes a column (not batch size, model, data ...).
    assert header[:3] == ["step", "optimizer.learning_rate", "trainer.num_train_steps"]
    assert header[3:] == ["loss", "val_loss", "steps_trained", "params", "model_flops", "mfu", "held-out.loss",
                          "held-out.bpb", "tiny.loss", "tiny.bpb"]
    by_name = {r[0].rsplit("-", 1)[0]: dict(zip(header, r, strict=True)) for r in body}
    assert by_name["checkpoints/slow"]["trainer.num_train_steps"] == "10"
    assert by_name["checkpoints/fast"]["trainer.num_train_steps"] == "20"
    assert float(by_name["checkpoints/fast"]["optimizer.learning_rate"]) == 1e-2
    assert by_name["checkpoints/fast"]["steps_trained"] == "20.0"
    bpb = [float(r[header.index("held-out.bpb")]) for r in body]
    assert bpb == sorted(bpb) and all(0 < b < 8 for b in bpb)
    # Sorted the other way round, the rows swap.
    desc = list(csv.reader(io.StringIO(_compare(built, "--format", "csv", "--sort", "held-out.bpb", "--descending"))))
    assert [r[0] for r in desc[1:]] == [r[0] for r in reversed(body)]

    document = json.loads(_compare(built, "--format", "json"))
    assert document["fields"] == ["optimizer.learning_rate", "trainer.num_train_steps"]
    assert document["eval_sets"] == ["held-out", "tiny"]
    markdown = _compare(built, "--format", "markdown").splitlines()
    assert markdown[0].startswith("| step | optimizer.learning_rate | trainer.num_train_steps | loss |")
    assert markdown[1].startswith("|---|") and len(markdown) == 4


def test_compare_refuses_an_unknown_metric(built):
    prefix, experiment = built
    result = CliRunner().invoke(cli, ["compare", str(experiment), "--prefix", str(prefix), "--sort", "accuracy"])
    assert result.exit_code == 2
    assert "no metric 'accuracy' to sort by" in result.output and "held-out.bpb" in result.output


def test_compare_chooses_columns_and_fits_the_terminal(built):
    prefix, experiment = built

    def compare(*args: str, width: int = 200) -> Any:
        return CliRunner().invoke(cli, ["compare", str(experiment), "--prefix", str(prefix), *args],
                                  env={"COLUMNS": str(width)})

    chosen = compare("--columns", "trainer.num_train_steps, held-out.*", "--sort", "held-out.bpb").output.splitlines()
    assert chosen[0].split() == ["step", "trainer.num_train_steps", "held-out.loss", "held-out.bpb"]
    assert len(chosen) == 3 and all(len(line.split()) == 4 for line in chosen[1:])
    csv_rows = list(csv.reader(io.StringIO(compare("--columns", "val_loss", "--format", "csv").output)))
    assert csv_rows[0] == ["step", "val_loss"] and len(csv_rows) == 3
    wrong = compare("--columns", "val_los")
    assert wrong.exit_code == 2 and "error: --columns: no column 'val_los'; did you mean 'val_loss'?" in wrong.output

    everything = json.loads(compare("--format", "json").output)
    columns = ["step", *everything["fields"], *everything["metrics"]]
    narrow = compare(width=60).output
    blocks = [block.splitlines() for block in narrow.split("\n\n")]
    # Every line fits; the columns that do not are in blocks below, each led by the step's name.
    assert max(len(line) for block in blocks for line in block) <= 60 and len(blocks) > 1, narrow
    assert all(block[0].split()[0] == "step" and len(block) == 3 for block in blocks), narrow
    assert [c for block in blocks for c in block[0].split()[1:]] == columns[1:], narrow


def test_report_shows_the_comparison_and_overlaid_curves(built, browser: Any, tmp_path):
    from selenium.webdriver.common.by import By

    from marin.cli.targets import load_targets

    prefix, experiment = built
    plan = runner(prefix).plan(load_targets([str(experiment)]))
    assert len(compare_plan(plan).rows) == 2
    path = write_report(collect_plan(plan, title="compare"), str(tmp_path / "report.html"))
    open_report(browser, path)
    section = browser.find_element(By.ID, "compare")
    assert section.is_displayed()
    loss_chart = section.find_element(By.CSS_SELECTOR, 'svg[data-chart="compare-loss"]')
    curves = loss_chart.find_elements(By.CSS_SELECTOR, "path.series")
    assert len(curves) == 2 and sorted(int(c.get_attribute("data-points")) for c in curves) == [10, 20]
    header = [th.text for th in section.find_elements(By.CSS_SELECTOR, "#compare-table th")]
    assert header[:3] == ["step", "optimizer.learning_rate", "trainer.num_train_steps"]
    # Sorting by a metric in the page reorders the rows.
    def order() -> list[str]:
        return [r.get_attribute("data-run") for r in section.find_elements(By.CSS_SELECTOR, "#compare-table tbody tr")]

    section.find_element(By.CSS_SELECTOR, 'th[data-metric="loss"] button').click()
    ascending = order()
    section.find_element(By.CSS_SELECTOR, 'th[data-metric="loss"] button').click()
    assert order() == list(reversed(ascending))
    # The model x eval-set table: one row per model, one column per eval set, bits per byte.
    evals = section.find_element(By.ID, "eval-table")
    assert [th.text for th in evals.find_elements(By.TAG_NAME, "th")] == ["model", "held-out", "tiny"]
    cells = evals.find_elements(By.CSS_SELECTOR, "td[data-eval]")
    assert len(cells) == 4 and all(0 < float(c.text) < 8 for c in cells)


def test_a_run_whose_training_steps_were_cached_still_draws_their_curves(built):
    from marin.cli.targets import load_targets
    from marin.report import collect_run

    prefix, experiment = built
    again = runner(prefix).run(load_targets([str(experiment)]))
    assert again.ok and {s.outcome.name for s in again.steps} == {"CACHED"}
    data = collect_run(again)
    compared = {row["hash"] for row in data.comparison["rows"]}
    curves = {s.name: len(s.metrics["series"]["loss"]) for s in data.steps if s.hash in compared}
    assert curves == {"checkpoints/slow": 10, "checkpoints/fast": 20}


def test_each_run_records_its_flops_and_a_speedrun_file_and_the_report_ranks_them(built, tmp_path):
    import dataclasses

    import jax

    from marin.cli.targets import load_targets
    from testsupport.lm_graph import TINY

    prefix, experiment = built
    plan = runner(prefix).plan(load_targets([str(experiment)]))
    comparison = compare_plan(plan)
    for row in comparison.rows:
        record = json.loads(Path(row.output_path, "speedrun.json").read_text())
        summary = json.loads(Path(row.output_path, "train_summary.json").read_text())
        trained = json.loads(Path(row.output_path, "config.json").read_text())["model"]
        model = dataclasses.replace(TINY, vocab_size=trained["vocab_size"])  # the data's vocabulary
        tokens = int(row.metrics["steps_trained"]) * 4 * 32
        assert record["params"] == model.num_params() == row.metrics["params"]
        assert record["tokens"] == tokens
        assert record["model_flops"] == pytest.approx(model.flops_per_token(32) * tokens) == row.metrics["model_flops"]
        assert record["val_loss"] == summary["val_loss"] and record["steps"] == summary["steps"]
        assert record["device_kind"] == jax.devices()[0].device_kind and record["device_count"] == 1
        assert record["wall_s"] > 0 and 0 < row.metrics["mfu"] < 1
    # The report's leaderboard: held-out bits per byte against model FLOPs, the frontier marked.
    page = Path(write_report(collect_plan(plan, title="compare"), str(tmp_path / "report.html"))).read_text()
    assert "Leaderboard: held-out.bpb against model FLOPs" in page
    cheap, costly = sorted(comparison.rows, key=lambda r: r.metrics["model_flops"])
    frontier = ["true", "true" if costly.metrics["held-out.bpb"] < cheap.metrics["held-out.bpb"] else "false"]
    for row, mark in zip((cheap, costly), frontier, strict=True):
        assert f'<tr data-run="{row.label}" data-frontier="{mark}">' in page


def test_a_single_run_has_no_differing_fields(built):
    prefix, _ = built
    plan = runner(prefix).plan([tiny_model("checkpoints/slow", steps=10,
                                           optimizer=AdamConfig(learning_rate=1e-3, warmup=2, schedule="constant"))])
    comparison = compare_plan(plan)
    assert comparison.fields == [] and len(comparison.rows) == 1
    assert comparison.rows[0].metrics["steps_trained"] == 10


def test_branches_differ_by_where_they_start_not_by_each_field_of_it(tmp_path):
    from levanter.optim import AdamConfig as Adam
    from marin.experiment.training.train import checkpoint

    wsd = dict(learning_rate=3e-3, warmup=2, schedule="wsd", decay_shape="linear")
    stable = tiny_model("checkpoints/stable", steps=30, optimizer=Adam(decay=10, **wsd))
    branches = [tiny_model(f"checkpoints/cool-{n}", steps=n + 6, optimizer=Adam(decay=6, **wsd),
                           initialize_from=checkpoint(stable, n)) for n in (10, 20)]
    comparison = compare_plan(runner(tmp_path / "store").plan([stable, *branches]))
    # Only where each branch starts; not the source's paths, which all branches share, nor the
    # unset initialize_from of the stable run beside them.
    assert comparison.fields == ["optimizer.decay", "trainer.initialize_from.step", "trainer.num_train_steps"]
    assert [r.fields["trainer.initialize_from.step"] for r in comparison.rows] == ["-", "10", "20"]
    assert all(r.metrics["loss"] is None for r in comparison.rows)  # nothing built yet
