"""Benchmark tasks as eval steps: one step per (checkpoint, task), lm-eval's files in it, its scores in
``eval_results.json`` (v2), ``marin compare``, the report and ``eval_report``; a dataset missing offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from marin.cli.main import cli
from marin.cli.targets import load_targets
from marin.execution.run.outcome import Outcome
from marin.experiment import evaluate, story_tasks
from marin.experiment.evaluation.results import EVAL_RESULTS_FILE, EvalResults, read_eval_results
from marin.experiment.evaluation.tasks import harness_eval_step
from rigging import filesystem as fs
from testsupport.browser import open_report
from testsupport.lm_graph import copy_prefix, data, runner, tiny_model

EXPERIMENT = '''\
from testsupport.lm_graph import data, tiny_model
from marin.experiment import eval_report, evaluate, story_tasks

short, longer = tiny_model(steps=10), tiny_model("checkpoints/tiny-longer", steps=20)
story = story_tasks("tasks/story-small", num_docs=8)
qa = evaluate("evals/qa", short, tasks=[story.task("story_qa")])
both = evaluate("evals/both", short, {"tiny": data}, tasks=[story.task("story_qa"), story.task("story_cloze")])
longer_qa = evaluate("evals/longer", longer, tasks=[story.task("story_qa")])
steps = [eval_report("reports/tiny", [qa, both, longer_qa])]
'''
QA = "evals/checkpoints/tiny/story_qa"
QA_LONGER = "evals/checkpoints/tiny-longer/story_qa"  # one name per step in a graph: the longer run is its own


@pytest.fixture(scope="module")
def built(trained_prefix: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Any]:
    root = tmp_path_factory.mktemp("task-eval")
    prefix = copy_prefix(trained_prefix, root / "store")
    experiment = root / "tasks_experiment.py"
    experiment.write_text(EXPERIMENT)
    result = runner(prefix).run(load_targets([str(experiment)]))
    assert result.ok, [(s.name, s.error) for s in result.failed]
    return prefix, experiment, result


def _harness_builds(result: Any) -> list[str]:
    fns = {p.hash: p.step.fn for p in result.plan.steps}
    return sorted(s.name for s in result.steps if s.outcome is Outcome.RAN and fns[s.hash] is harness_eval_step)


def _task_output(result: Any, name: str, model_steps: int = 10) -> str:
    [path] = [p.output_path for p in result.plan.steps
              if p.name == name and p.step.config.model.config.trainer.num_train_steps == model_steps]
    return path


def test_one_step_per_checkpoint_and_task_whoever_asks_for_it(built) -> None:
    _, _, result = built
    # story_qa of the short model is asked for by two evaluations: one step, built once.
    assert _harness_builds(result) == sorted([QA, QA_LONGER, "evals/checkpoints/tiny/story_cloze"]), _harness_builds(result)
    names = [p.name for p in result.plan.steps]
    assert names.count(QA) == 1 and names.count(QA_LONGER) == 1  # one per model
    model = tiny_model(steps=10)
    story = story_tasks("tasks/story-small", num_docs=8)
    one = evaluate("evals/one", model, tasks=[story.task("story_qa")])
    other = evaluate("evals/other", model, {"tiny": data}, tasks=[story.task("story_place"), story.task("story_qa")],
                     version="v2")
    assert one.config.tasks[0].lower().hash == other.config.tasks[1].lower().hash
    assert other.config.losses.name == "evals/other/losses"


def test_adding_a_task_builds_only_that_tasks_step(built, tmp_path: Path) -> None:
    prefix = copy_prefix(built[0], tmp_path / "store")
    story = story_tasks("tasks/story-small", num_docs=8)
    grown = evaluate("evals/both", tiny_model(steps=10), {"tiny": data},
                     tasks=[story.task("story_qa"), story.task("story_cloze"), story.task("story_place")])
    again = runner(prefix).run([grown])
    assert again.ok, [(s.name, s.error) for s in again.failed]
    ran = sorted(s.name for s in again.steps if s.outcome is Outcome.RAN)
    # The new task's step, and the cheap step gathering the results; the losses and the other tasks are cached.
    assert ran == ["evals/both", "evals/checkpoints/tiny/story_place"], ran
    results = read_eval_results(again.by_name("evals/both").output_path)
    assert results is not None and list(results.tasks) == ["story_qa", "story_cloze", "story_place"]
    assert list(results.datasets) == ["tiny"]


def test_a_task_step_holds_lm_evals_files_and_its_accuracy_recomputes_from_the_samples(built) -> None:
    _, _, result = built
    folder = _task_output(result, QA)
    harness = json.loads(fs.read_text(fs.join(folder, "results.json")))
    lines = [json.loads(line) for line in fs.read_text(fs.join(folder, "samples_story_qa.jsonl")).splitlines()]
    assert len(lines) == 8 and {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps"} <= set(lines[0])
    # acc: the choice of highest log-likelihood is the target (filtered_resps: [log p, is greedy] per choice).
    hits = [max(range(len(s["filtered_resps"])), key=lambda i: float(s["filtered_resps"][i][0])) == s["target"]
            for s in lines]
    assert sum(hits) / len(hits) == harness["results"]["story_qa"]["acc,none"]
    # The evaluation's own results hold the harness's numbers and where they came from.
    both = read_eval_results(result.by_name("evals/both").output_path)
    assert both is not None and both.task_outputs["story_qa"] == folder
    assert both.tasks["story_qa"].metrics["acc"] == harness["results"]["story_qa"]["acc,none"]
    assert both.tasks["story_qa"].stderr["acc"] == harness["results"]["story_qa"]["acc_stderr,none"]
    assert both.tasks["story_qa"].samples == 8 and both.datasets["tiny"]["loss"] > 0
    document = json.loads(fs.read_text(fs.join(result.by_name("evals/both").output_path, EVAL_RESULTS_FILE)))
    assert document["format"] == "marin.eval/v2" and document["tasks"]["story_cloze"]["metrics"]["perplexity"] > 1


def test_marin_compare_shows_task_scores_beside_losses_with_the_harness_values(built) -> None:
    prefix, experiment, result = built
    invoke = CliRunner().invoke(cli, ["compare", str(experiment), "--prefix", str(prefix), "--format", "json"],
                                catch_exceptions=False)
    assert invoke.exit_code == 0, invoke.output
    document = json.loads(invoke.output)
    assert document["tasks"] == ["story_qa", "story_cloze"]
    assert document["task_metrics"] == ["story_qa.acc", "story_qa.acc_norm", "story_cloze.perplexity", "story_cloze.acc"]
    # After the training and FLOPs columns: the dataset's, then the tasks'.
    assert document["metrics"][:6] == ["loss", "val_loss", "steps_trained", "params", "model_flops", "mfu"]
    assert document["metrics"][6:8] == ["tiny.loss", "tiny.bpb"] and document["metrics"][8:] == document["task_metrics"]
    assert document["higher_is_better"]["story_qa.acc"] is True and document["higher_is_better"]["story_cloze.perplexity"] is False
    for row in document["rows"]:
        steps = 10 if row["fields"]["trainer.num_train_steps"] == "10" else 20
        harness = json.loads(fs.read_text(fs.join(_task_output(result, QA if steps == 10 else QA_LONGER, steps), "results.json")))["results"]
        assert row["metrics"]["story_qa.acc"] == harness["story_qa"]["acc,none"]
        assert row["metrics"]["story_qa.acc_norm"] == harness["story_qa"]["acc_norm,none"]
        assert row["stderr"]["story_qa.acc"] == harness["story_qa"]["acc_stderr,none"]
    markdown = CliRunner().invoke(cli, ["compare", str(experiment), "--prefix", str(prefix), "--format", "markdown",
                                        "--sort", "story_qa.acc", "--descending"], catch_exceptions=False).output
    assert "| story_qa.acc | story_qa.acc_norm | story_cloze.perplexity | story_cloze.acc |" in markdown.splitlines()[0]


def test_eval_report_puts_the_evaluations_in_one_table(built) -> None:
    _, _, result = built
    folder = result.by_name("reports/tiny").output_path
    report = json.loads(fs.read_text(fs.join(folder, "eval_report.json")))
    assert report["format"] == "marin.eval_report/v1"
    assert [r["label"] for r in report["rows"]] == ["evals/qa", "evals/both", "evals/longer"]
    assert report["columns"] == ["tiny.loss", "tiny.bpb", "story_qa.acc", "story_qa.acc_norm", "story_cloze.perplexity",
                                 "story_cloze.acc"]
    for row in report["rows"]:
        expected = read_eval_results(result.by_name(row["label"]).output_path)
        assert expected is not None and row["metrics"] == expected.metrics() and row["stderr"] == expected.stderr()
    assert report["rows"][0]["metrics"]["story_qa.acc"] == report["rows"][1]["metrics"]["story_qa.acc"]  # one step
    lines = fs.read_text(fs.join(folder, "eval_report.md")).splitlines()
    assert lines[0] == ("| eval | model | checkpoint | tiny.loss | tiny.bpb | story_qa.acc | story_qa.acc_norm | "
                        "story_cloze.perplexity | story_cloze.acc |")
    qa_row = lines[2].split(" | ")
    assert qa_row[:5] == ["| evals/qa", "checkpoints/tiny", "final", "-", "-"] and " ± " in qa_row[5]
    assert len(lines) == 5


def test_the_report_shows_task_scores_beside_the_losses(built, browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    from marin.report import collect_plan, write_report

    prefix, experiment, _ = built
    plan = runner(prefix).plan(load_targets([str(experiment)]))
    path = write_report(collect_plan(plan, title="tasks"), str(tmp_path / "report.html"))
    open_report(browser, path)
    tasks = browser.find_element(By.ID, "task-scores")
    assert tasks.is_displayed()
    compared = json.loads(CliRunner().invoke(cli, ["compare", str(experiment), "--prefix", str(prefix), "--format",
                                                   "json"]).output)
    # A row per task metric (grouped under its task), a column per run.
    assert [td.text for td in tasks.find_elements(By.CSS_SELECTOR, "td.task")] == ["story_qa", "story_cloze"]
    rows = tasks.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert [r.get_attribute("data-metric") for r in rows] == compared["task_metrics"]
    runs = [th.get_attribute("data-run") for th in tasks.find_elements(By.CSS_SELECTOR, "th.run")]
    assert runs == [r["label"] for r in compared["rows"]]
    by_label = {r["label"]: r for r in compared["rows"]}
    acc = tasks.find_element(By.CSS_SELECTOR, 'tr[data-metric="story_qa.acc"]')
    for label in runs:
        cell = acc.find_element(By.CSS_SELECTOR, f'td[data-run="{label}"]')
        value, err = by_label[label]["metrics"]["story_qa.acc"], by_label[label]["stderr"]["story_qa.acc"]
        shown, shown_err = cell.text.split(" ± ")
        assert abs(float(shown) - value) < 1e-3 and abs(float(shown_err) - err) < 1e-3, (cell.text, value, err)
    # The best run of a metric (more accuracy is better, as the task says) is bold.
    values = {label: by_label[label]["metrics"]["story_qa.acc"] for label in runs}
    bold = {label for label in runs
            if "best" in acc.find_element(By.CSS_SELECTOR, f'td[data-run="{label}"]').get_attribute("class")}
    assert bold == {label for label, v in values.items() if v == max(values.values())}
    assert acc.find_element(By.CSS_SELECTOR, "td.mono").text == "acc ↑"


def test_a_dataset_missing_offline_is_one_line_and_exit_2_before_anything_runs(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    task = tmp_path / "absent_arc.yaml"
    task.write_text("task: absent_arc\ndataset_path: someone/absent-benchmark\noutput_type: multiple_choice\n"
                    "test_split: test\ndoc_to_text: '{{question}}'\ndoc_to_target: 0\ndoc_to_choice: '{{choices}}'\n")
    experiment = tmp_path / "absent.py"
    experiment.write_text("from testsupport.lm_graph import tiny_model\nfrom marin.experiment import evaluate\n"
                          f"steps = [evaluate('evals/absent', tiny_model(steps=10), tasks=[{str(task)!r}])]\n")
    prefix = tmp_path / "store"
    invoke = CliRunner().invoke(cli, ["run", str(experiment), "--prefix", str(prefix)])
    assert invoke.exit_code == 2, invoke.output
    lines = invoke.output.strip().splitlines()
    assert len(lines) == 1, invoke.output
    assert lines[0].startswith("error: task 'absent_arc' needs Hugging Face dataset 'someone/absent-benchmark'")
    assert "hf download someone/absent-benchmark --repo-type dataset" in lines[0]
    # Refused before the run: nothing was built, not even the data or the model.
    assert not list(prefix.rglob("success.json"))


def test_results_of_marin_eval_v1_are_still_read(tmp_path: Path) -> None:
    v1 = {"format": "marin.eval/v1", "model": "/m", "checkpoint": 200, "step": 200, "seq_len": 32,
          "results": {"held-out": {"kind": "raw text", "loss": 2.5, "bits_per_byte": 1.25, "tokens": 9}}}
    (tmp_path / EVAL_RESULTS_FILE).write_text(json.dumps(v1))
    results = read_eval_results(str(tmp_path))
    assert results is not None and results.tasks == {} and results.checkpoint == 200
    assert results.metrics("@200") == {"held-out@200.loss": 2.5, "held-out@200.bpb": 1.25}
    # Written again, it is v2 and reads back the same.
    assert EvalResults.from_json(json.loads(json.dumps(results.to_json()))) == results
    (tmp_path / EVAL_RESULTS_FILE).write_text(json.dumps({**v1, "format": "marin.eval/v9"}))
    assert read_eval_results(str(tmp_path)) is None
    assert read_eval_results(str(tmp_path / "absent")) is None


def test_evaluate_names_what_is_wrong_with_its_tasks(tmp_path: Path) -> None:
    model = tiny_model(steps=10)
    story = story_tasks("tasks/s", num_docs=8, tasks=("story_qa",))
    with pytest.raises(ValueError, match="give datasets=.*tasks=.*or both"):
        evaluate("evals/x", model)
    with pytest.raises(ValueError, match="task YAML file '/nowhere/t.yaml' does not exist"):
        evaluate("evals/x", model, tasks=["/nowhere/t.yaml"])
    with pytest.raises(ValueError, match=r"tasks must be distinct, got \['story_qa', 'story_qa'\]"):
        evaluate("evals/x", model, tasks=[story, story.task("story_qa")])
    with pytest.raises(ValueError, match="does not write 'story_cloze'"):
        story.task("story_cloze")
    with pytest.raises(ValueError, match="num_fewshot must be an int >= 0 or None, got -1"):
        evaluate("evals/x", model, tasks=["arc_easy"], num_fewshot=-1)
    with pytest.raises(ValueError, match="a task must be an lm-eval task name"):
        evaluate("evals/x", model, tasks=[3])


def test_a_task_files_key_is_its_content_and_a_builtin_tasks_key_holds_lm_evals_version(tmp_path: Path) -> None:
    from importlib.metadata import version

    model = tiny_model(steps=10)
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "mine.yaml").write_text("task: mine\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
                                      "    test: mine.jsonl\noutput_type: multiple_choice\n")
    (folder / "mine.jsonl").write_text('{"q": 1}\n')

    def key() -> str:
        [step] = evaluate("evals/x", model, tasks=[str(folder / "mine.yaml")]).config.tasks
        return step.lower().hash

    first = key()
    assert key() == first
    (folder / "mine.jsonl").write_text('{"q": 2}\n')  # the data the YAML names changed: another step
    assert key() != first
    [builtin] = evaluate("evals/x", model, tasks=["arc_easy"]).config.tasks
    assert builtin.name == "evals/checkpoints/tiny/arc_easy" and builtin.config.lm_eval_version == version("lm_eval")
    [at_ten] = evaluate("evals/x", tiny_model(steps=20), tasks=["arc_easy"], checkpoint=10).config.tasks
    assert at_ten.name == "evals/checkpoints/tiny/step-10/arc_easy" and at_ten.config.checkpoint == 10


def test_tasks_run_during_training_log_curves_that_end_at_the_final_evaluation(trained_prefix: Path,
                                                                               tmp_path: Path) -> None:
    # train_lm(..., eval_tasks=[...], eval_every=N): the harness on the trainer's parameters every N
    # steps and at the end, scores in metrics.jsonl as <task>.<metric>; the last equal what an eval
    # step of the final parameters finds.
    prefix = copy_prefix(trained_prefix, tmp_path / "store")
    story = story_tasks("tasks/story-small", num_docs=8)
    model = tiny_model("checkpoints/tiny-tasks", steps=4, eval_every=2, eval_tasks=[story.task("story_qa")])
    after = evaluate("evals/tiny-tasks", model, tasks=[story.task("story_qa")])
    result = runner(prefix).run([after])
    assert result.ok, [(s.name, s.error) for s in result.failed]
    rows = [json.loads(line) for line in
            fs.read_text(fs.join(result.by_name("checkpoints/tiny-tasks").output_path, "metrics.jsonl")).splitlines()]
    logged = {row["step"]: row["story_qa.acc"] for row in rows if "story_qa.acc" in row}
    assert sorted(logged) == [2, 4]
    final = read_eval_results(result.by_name("evals/tiny-tasks").output_path)
    assert final is not None and final.tasks["story_qa"].metrics["acc"] == logged[4]
    # The tasks are part of the run's identity only when given: runs without them keep their hashes.
    assert tiny_model("checkpoints/tiny-tasks", steps=4, eval_every=2).lower().hash != model.lower().hash
