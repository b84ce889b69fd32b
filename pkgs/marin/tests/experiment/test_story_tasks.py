"""The generated benchmark tasks: deterministic, shaped as the benchmarks they imitate, answers the stories state."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from marin.experiment.data.corpus import generate_story, story_facts
from marin.experiment.tasks.story import StoryTask, StoryTasksConfig, story_task_docs, write_story_tasks

SMALL = StoryTasksConfig(num_docs=40)


def test_the_same_settings_write_the_same_bytes_and_the_seed_changes_them(tmp_path: Path) -> None:
    a = write_story_tasks(str(tmp_path / "a"), SMALL)
    write_story_tasks(str(tmp_path / "b"), SMALL)
    assert sorted(a) == sorted(t.value for t in StoryTask)
    for task in a:
        for suffix in (".yaml", ".jsonl"):
            assert (tmp_path / "a" / f"{task}{suffix}").read_bytes() == (tmp_path / "b" / f"{task}{suffix}").read_bytes()
    other = write_story_tasks(str(tmp_path / "c"), StoryTasksConfig(num_docs=40, seed=1))
    assert Path(other["story_qa"]).with_suffix(".jsonl").read_bytes() != \
        (tmp_path / "a" / "story_qa.jsonl").read_bytes()
    lines = (tmp_path / "a" / "story_text.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == list(range(1_000_000, 1_000_040))


def test_yaml_files_name_their_data_relatively_and_the_benchmarks_metrics(tmp_path: Path) -> None:
    written = write_story_tasks(str(tmp_path), SMALL)
    specs = {task: yaml.safe_load(Path(path).read_text()) for task, path in written.items()}
    assert specs["story_qa"]["dataset_kwargs"] == {"data_files": {"test": "story_qa.jsonl"}}
    assert {m["metric"] for m in specs["story_ending"]["metric_list"]} == {"acc", "acc_norm"}
    assert {m["metric"] for m in specs["story_cloze"]["metric_list"]} == {"acc", "perplexity"}
    assert specs["story_text"]["output_type"] == "loglikelihood_rolling"
    assert specs["story_place"]["doc_to_choice"] == "{{[sol1, sol2]}}"


def test_right_answers_are_the_facts_of_the_story_and_wrong_ones_are_not() -> None:
    positions = set()
    for doc in story_task_docs(StoryTask.QA, SMALL):
        facts = story_facts(0, doc["id"])
        story = generate_story(0, doc["id"])
        assert doc["question"] == f"{story} What did {facts.name} have?"
        right = doc["choices"]["label"].index(doc["answerKey"])
        positions.add(right)
        assert doc["choices"]["text"][right] == f"a {facts.obj}"
        assert len(set(doc["choices"]["text"])) == 4
    assert positions == {0, 1, 2, 3}
    for doc in story_task_docs(StoryTask.PLACE, SMALL):
        facts = story_facts(0, doc["id"])
        choices = [doc["sol1"], doc["sol2"]]
        assert choices[doc["label"]] == f"In {facts.place}." and choices[1 - doc["label"]] != choices[doc["label"]]


def test_endings_and_cloze_follow_the_hero() -> None:
    for doc in story_task_docs(StoryTask.ENDING, SMALL):
        story, name = generate_story(0, doc["id"]), story_facts(0, doc["id"]).name
        right = doc["endings"][doc["label"]]
        assert f"{doc['ctx']} {right}" == story and name in right
        assert all(not re.search(rf"\b{name}\b", e) for i, e in enumerate(doc["endings"]) if i != doc["label"])
    for doc in story_task_docs(StoryTask.CLOZE, SMALL):
        story, name = generate_story(0, doc["id"]), story_facts(0, doc["id"]).name
        assert story.startswith(doc["text"]) and doc["text"].split(" ")[-1] == name
        assert not re.search(rf"(?<= ){name}(?![A-Za-z'])", story[len(doc["text"]):])  # its last mention


def test_bad_settings_are_named() -> None:
    with pytest.raises(ValueError, match="num_docs must be a positive int, got 0"):
        StoryTasksConfig(num_docs=0)
    with pytest.raises(ValueError, match="'story_nope' is not a valid StoryTask"):
        StoryTasksConfig(tasks=("story_nope",))
    assert StoryTasksConfig(tasks=("story_qa",)).tasks == (StoryTask.QA,)
