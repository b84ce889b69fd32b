"""Harness tasks offline: a Hub dataset id read from the hub cache, a missing one named in one line, and
the generated story and word-problem tasks run by the real harness with a small levanter model
(nothing downloaded)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from lm_eval.api.model import LM

from levanter.eval_harness import (
    HarnessConfig,
    LevanterLM,
    TaskDataUnavailable,
    TaskRunConfig,
    check_task_data,
    run_tasks,
)
from levanter.models.llama import LlamaConfig
from marin.experiment.data.corpus import generate_story
from marin.experiment.tasks.story import StoryTask, StoryTasksConfig, write_story_tasks
from marin.experiment.tasks.word_problems import WordProblemsConfig, write_word_problems
from testsupport.hub_cache import write_hub_dataset
from testsupport.levanter_data import byte_level_tokenizer, random_params

MODEL = LlamaConfig(vocab_size=384, hidden_dim=32, intermediate_dim=64, num_heads=4, num_kv_heads=2, num_layers=2,
                    max_seq_len=512)

# ARC's layout on the Hub: a config per subset, declared in the README, Parquet files per split.
_ARC_README = b"""---
configs:
- config_name: ARC-Easy
  data_files:
  - split: test
    path: ARC-Easy/test-*
---
"""
_ARC_TASK = """task: cached_arc
dataset_path: allenai/ai2_arc
dataset_name: ARC-Easy
output_type: multiple_choice
test_split: test
doc_to_text: "Question: {{question}}\\nAnswer:"
doc_to_target: "{{choices.label.index(answerKey)}}"
doc_to_choice: "{{choices.text}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""




@pytest.fixture(scope="module")
def lm() -> LevanterLM:
    tokenizer = byte_level_tokenizer([generate_story(0, i) for i in range(200)], vocab_size=MODEL.vocab_size)
    return LevanterLM(MODEL, random_params(MODEL, seed=1), tokenizer, HarnessConfig(batch_size=4, seq_len=512),
                      name="nano-random")


def _arc_parquet(n: int) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"id": f"q{i}", "question": f"Which friend did story {i} meet?",
             "choices": {"text": ["an owl", "a goat", "a bee"], "label": ["A", "B", "C"]}, "answerKey": "ABC"[i % 3]}
            for i in range(n)]
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    return buf.getvalue()


def test_a_hub_dataset_id_is_read_from_the_hub_cache(hf_home: Path, tmp_path: Path, lm: LevanterLM) -> None:
    snapshot = write_hub_dataset(hf_home, "allenai/ai2_arc", {"README.md": _ARC_README,
                                                             "ARC-Easy/test-00000-of-00001.parquet": _arc_parquet(9)})
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "cached_arc.yaml").write_text(_ARC_TASK)
    results = run_tasks(lm, TaskRunConfig(tasks=("cached_arc",), include_paths=(str(tasks),)), str(tmp_path / "out"))
    assert results["n-samples"]["cached_arc"] == {"original": 9, "effective": 9}
    config = results["configs"]["cached_arc"]
    assert config["dataset_path"] == str(snapshot)
    assert (config["metadata"]["hub_dataset"], config["metadata"]["hub_revision"]) == ("allenai/ai2_arc", snapshot.name)
    assert [s["doc"]["id"] for s in results["samples"]["cached_arc"]] == [f"q{i}" for i in range(9)]


def test_a_dataset_missing_from_the_cache_is_one_line_naming_task_dataset_and_remedy(hf_home: Path, tmp_path: Path,
                                                                                  lm: LevanterLM) -> None:
    (tmp_path / "absent.yaml").write_text(_ARC_TASK.replace("cached_arc", "absent_arc")
                                          .replace("allenai/ai2_arc", "someone/absent-benchmark"))
    with pytest.raises(TaskDataUnavailable) as info:
        run_tasks(lm, TaskRunConfig(tasks=(str(tmp_path / "absent.yaml"),)), str(tmp_path / "out"))
    message = str(info.value)
    assert "\n" not in message and info.value.__cause__ is None and info.value.__suppress_context__
    assert "task 'absent_arc' needs Hugging Face dataset 'someone/absent-benchmark'" in message
    assert "not in the hub cache (HF_HUB_OFFLINE=1)" in message and str(hf_home / "hub") in message
    assert "hf download someone/absent-benchmark --repo-type dataset" in message
    assert not (tmp_path / "out").exists()
    # Found before any run, the same line, without the harness reading any data.
    with pytest.raises(TaskDataUnavailable) as checked:
        check_task_data([str(tmp_path / "absent.yaml")])
    assert str(checked.value) == message


def test_a_check_of_task_data_reads_the_configs_and_loads_no_data(hf_home: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    write_hub_dataset(hf_home, "allenai/ai2_arc", {"README.md": _ARC_README,
                                                   "ARC-Easy/test-00000-of-00001.parquet": _arc_parquet(3)})
    (tmp_path / "cached_arc.yaml").write_text(_ARC_TASK)
    loads: list[object] = []
    original = datasets.load_dataset  # the harness calls it as datasets.load_dataset
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: loads.append(a) or original(*a, **k))
    check_task_data([str(tmp_path / "cached_arc.yaml")])
    assert loads == []


def test_every_story_task_runs_through_the_harness_with_its_benchmarks_metrics(tmp_path: Path, lm: LevanterLM) -> None:
    written = write_story_tasks(str(tmp_path / "tasks"), StoryTasksConfig(num_docs=12))
    # By name from the folder as an include path, and by YAML path: the same tasks.
    names = tuple(t.value for t in StoryTask)
    results = run_tasks(lm, TaskRunConfig(tasks=names, include_paths=(str(tmp_path / "tasks"),), limit=8),
                        str(tmp_path / "out"))
    metrics = {task: {k.split(",")[0] for k in values if k.endswith(",none")} for task, values in results["results"].items()}
    for task in ("story_qa", "story_place", "story_ending"):
        assert metrics[task] == {"acc", "acc_stderr", "acc_norm", "acc_norm_stderr"}, task
    assert metrics["story_cloze"] == {"acc", "acc_stderr", "perplexity", "perplexity_stderr"}
    assert {"word_perplexity", "byte_perplexity", "bits_per_byte"} <= metrics["story_text"]
    assert all(results["n-samples"][t]["effective"] == 8 for t in names)
    written_results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(written_results["results"]) == set(names) and written_results["config"]["model"] == "nano-random"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(["results.json"] + [f"samples_{t}.jsonl" for t in names])
    by_path = run_tasks(lm, TaskRunConfig(tasks=(written["story_cloze"],), limit=8))
    assert by_path["results"]["story_cloze"]["acc,none"] == results["results"]["story_cloze"]["acc,none"]


class _Oracle(LM):
    """An lm-eval model that answers the word problems whose id is even with their worked answer and
    the others with a wrong number: scores the task's filter and metric, not a model."""

    def __init__(self, docs: dict[str, dict]):
        super().__init__()
        self.docs = docs

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        out = []
        for request in requests:
            question = request.args[0].rsplit("Question: ", 1)[1].split("\nAnswer:")[0]
            doc = self.docs[question]
            right = doc["answer"].rsplit("#### ", 1)[1]
            out.append(doc["answer"] if doc["id"] % 2 == 0 else doc["answer"].replace(f"#### {right}", "#### 1000"))
        return out

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError


def test_word_problems_are_scored_by_exact_match_of_the_final_number(tmp_path: Path) -> None:
    config = WordProblemsConfig(num_docs=10, num_fewshot=2)
    path = write_word_problems(str(tmp_path / "tasks"), config)
    docs = [json.loads(line) for line in (tmp_path / "tasks" / "word_problems_test.jsonl").read_text().splitlines()]
    results = run_tasks(_Oracle({d["question"]: d for d in docs}), TaskRunConfig(tasks=(path,)))
    assert results["results"]["word_problems"]["exact_match,strict-match"] == 0.5
    # Two worked problems of the train split precede each question.
    prompt = results["samples"]["word_problems"][0]["arguments"][0][0]
    assert prompt.count("Question: ") == 3 and prompt.count("#### ") == 2


def test_word_problems_sampled_through_the_harness_are_reproducible(tmp_path: Path, lm: LevanterLM) -> None:
    path = write_word_problems(str(tmp_path / "tasks"), WordProblemsConfig(
        num_docs=6, num_fewshot=1, max_gen_toks=16, do_sample=True, temperature=1.0, repeats=2))
    first = run_tasks(lm, TaskRunConfig(tasks=(path,)))
    again = run_tasks(lm, TaskRunConfig(tasks=(path,)))
    answers = [s["resps"][0] for s in first["samples"]["word_problems"]]
    assert answers == [s["resps"][0] for s in again["samples"]["word_problems"]]
    assert len(answers) == 6 and all(len(r) == 2 for r in answers)
    assert any(r[0] != r[1] for r in answers)  # the repeats draw apart
    assert "exact_match,strict-match" in first["results"]["word_problems"]


def test_each_prompt_template_is_compiled_once_per_run_and_renders_the_same_text(tmp_path: Path, monkeypatch) -> None:
    import contextlib

    import lm_eval.utils

    import levanter.eval_harness.run as harness_run

    path = write_word_problems(str(tmp_path / "tasks"), WordProblemsConfig(num_docs=10, num_fewshot=2))
    docs = [json.loads(line) for line in (tmp_path / "tasks" / "word_problems_test.jsonl").read_text().splitlines()]
    compiled: list[str] = []
    from_string = lm_eval.utils.env.from_string

    def counted(source, *args, **kwargs):
        compiled.append(source)
        return from_string(source, *args, **kwargs)

    monkeypatch.setattr(lm_eval.utils.env, "from_string", counted)

    def prompts() -> list:
        results = run_tasks(_Oracle({d["question"]: d for d in docs}), TaskRunConfig(tasks=(path,)))
        return [(s["doc_id"], s["arguments"]) for s in results["samples"]["word_problems"]]

    once = prompts()
    once_compiled = list(compiled)
    assert once_compiled and len(once_compiled) == len(set(once_compiled)), once_compiled
    compiled.clear()
    # The harness as it comes: the same templates compiled again for every document.
    monkeypatch.setattr(harness_run, "_templates_compiled_once", contextlib.nullcontext)
    assert prompts() == once
    assert set(compiled) == set(once_compiled) and len(compiled) > 5 * len(once_compiled), len(compiled)
