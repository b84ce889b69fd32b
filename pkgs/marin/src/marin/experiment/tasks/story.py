"""Benchmark tasks for the lm-evaluation-harness, generated from the bundled story corpus (no download).

Each task is a harness task YAML beside its data (``<task>.yaml`` + ``<task>.jsonl``), laid out
as a well-known benchmark is, so the harness scores it with that benchmark's metrics:

==============  ==================  ========================================================
task            shaped like         a document
==============  ==================  ========================================================
story_qa        ARC (4 choices)     a story, then "What did <hero> have?"; choices: objects
story_place     PIQA (2 choices)    a story, then "Where did <hero> live?"; choices: places
story_ending    HellaSwag (4)       a story without its last two sentences; choices: endings
story_cloze     LAMBADA (cloze)     a story up to the last mention of its hero; target: the name
story_text      WikiText (rolling)  a whole story; word and byte perplexity, bits per byte
==============  ==================  ========================================================

The right answers are facts the story states (``story_facts``); wrong choices are the same facts
of other stories, so a model that reads the story (or has learnt how these stories go) can tell
them apart and a model that does not scores chance. Stories are drawn from ``first_index`` on,
by default far past any generated corpus, so they are held out from training; the same settings
write the same bytes. The YAML names its data file by a relative path, resolved against the
YAML's folder by ``levanter.eval_harness``.

``story_tasks(name)`` is the step that writes them (a handle, content-hashed like any step);
``evaluate(..., tasks=story_tasks(...))`` runs each of its tasks on a model
(:mod:`marin.experiment.evaluation.tasks`).
"""

from __future__ import annotations

import enum
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from marin.execution.core.identity import keep_identities
from marin.execution.core.lazy import StepHandle
from marin.execution.core.placeholders import OutputPath, output_path_of
from marin.experiment.data.corpus import generate_story, story_facts
from rigging import filesystem as fs

__all__ = ["StoryTask", "StoryTasks", "StoryTasksConfig", "story_task_docs", "story_tasks", "story_tasks_step",
           "write_story_tasks"]


class StoryTask(enum.Enum):
    """The generated tasks (values are their harness task names)."""

    QA = "story_qa"
    PLACE = "story_place"
    ENDING = "story_ending"
    CLOZE = "story_cloze"
    TEXT = "story_text"


@dataclass(frozen=True)
class StoryTasksConfig:
    """Which stories the tasks are made of."""

    seed: int = 0
    """Seed of the story generator (the bundled corpus's default is 0)."""
    num_docs: int = 200
    """Documents per task."""
    first_index: int = 1_000_000
    """Index of the first story used; stories below it (any corpus smaller than this) are not asked about."""
    tasks: tuple[StoryTask, ...] = tuple(StoryTask)
    """Which tasks to write."""

    def __post_init__(self) -> None:
        if not isinstance(self.num_docs, int) or isinstance(self.num_docs, bool) or self.num_docs <= 0:
            raise ValueError(f"num_docs must be a positive int, got {self.num_docs!r}")
        if not isinstance(self.first_index, int) or self.first_index < 0:
            raise ValueError(f"first_index must be an int >= 0, got {self.first_index!r}")
        tasks = tuple(StoryTask(t) for t in self.tasks)
        if not tasks or len(set(tasks)) != len(tasks):
            raise ValueError(f"tasks must name distinct story tasks, got {self.tasks!r}")
        object.__setattr__(self, "tasks", tasks)


_SENTENCE_END = re.compile(r'[.!?]"?\s+(?=["A-Z])')


def _sentences(story: str) -> list[str]:
    """The story's sentences (a quotation ending a sentence stays with it)."""
    cuts = [m.end() for m in _SENTENCE_END.finditer(story)]
    return [story[a:b].strip() for a, b in zip([0, *cuts], [*cuts, len(story)], strict=True)]


def _others(seed: int, index: int, task: StoryTask, count: int, value: Callable[[int], str | None],
            exclude: str) -> list[str]:
    """``count`` distinct values of other stories (None: that story does not qualify), none equal to
    ``exclude``; drawn per story, so deterministic."""
    rng = random.Random(f"story-tasks:{seed}:{task.value}:{index}")
    found: list[str] = []
    while len(found) < count:
        other = value(rng.randrange(1 << 40))
        if other is not None and other != exclude and other not in found:
            found.append(other)
    return found


def _shuffled_in(right: str, wrong: list[str], seed: int, index: int, task: StoryTask) -> tuple[list[str], int]:
    """The choices with the right one at a position drawn per story, and that position."""
    at = random.Random(f"story-tasks-answer:{seed}:{task.value}:{index}").randrange(len(wrong) + 1)
    return [*wrong[:at], right, *wrong[at:]], at


def _qa(seed: int, index: int) -> dict[str, Any]:
    facts = story_facts(seed, index)
    wrong = _others(seed, index, StoryTask.QA, 3, lambda i: story_facts(seed, i).obj, facts.obj)
    texts, at = _shuffled_in(facts.obj, wrong, seed, index, StoryTask.QA)
    labels = list("ABCD")
    return {"id": index, "question": f"{generate_story(seed, index)} What did {facts.name} have?",
            "choices": {"text": [f"a {t}" for t in texts], "label": labels}, "answerKey": labels[at]}


def _place(seed: int, index: int) -> dict[str, Any]:
    facts = story_facts(seed, index)
    [wrong] = _others(seed, index, StoryTask.PLACE, 1, lambda i: story_facts(seed, i).place, facts.place)
    (sol1, sol2), at = _shuffled_in(facts.place, [wrong], seed, index, StoryTask.PLACE)
    return {"id": index, "goal": f"{generate_story(seed, index)} Where did {facts.name} live?",
            "sol1": f"In {sol1}.", "sol2": f"In {sol2}.", "label": at}


def _ending(seed: int, index: int) -> dict[str, Any]:
    sentences = _sentences(generate_story(seed, index))
    name = story_facts(seed, index).name
    right = " ".join(sentences[-2:])

    def ending_about_someone_else(i: int) -> str | None:
        # Telling the right ending apart means following the hero.
        return None if story_facts(seed, i).name == name else " ".join(_sentences(generate_story(seed, i))[-2:])

    wrong = _others(seed, index, StoryTask.ENDING, 3, ending_about_someone_else, right)
    endings, at = _shuffled_in(right, wrong, seed, index, StoryTask.ENDING)
    return {"id": index, "ctx": " ".join(sentences[:-2]), "endings": endings, "label": at}


def _cloze(seed: int, index: int) -> dict[str, Any]:
    story, name = generate_story(seed, index), story_facts(seed, index).name
    first_sentence_end = len(_sentences(story)[0])
    mentions = [m.end() for m in re.finditer(rf"(?<= ){re.escape(name)}(?![A-Za-z'])", story)
                if m.start() > first_sentence_end]
    if not mentions:
        raise ValueError(f"story {index} of seed {seed} never names its hero {name!r} after its first sentence")
    return {"id": index, "text": story[:mentions[-1]]}


def _text(seed: int, index: int) -> dict[str, Any]:
    return {"id": index, "text": generate_story(seed, index)}


_ACC = [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}]
_ACC_NORM = [*_ACC, {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True}]

# Per task: the document builder and the harness config (the benchmark's own prompt and metrics).
_TASKS: dict[StoryTask, tuple[Callable[[int, int], dict[str, Any]], dict[str, Any]]] = {
    StoryTask.QA: (_qa, {"output_type": "multiple_choice", "doc_to_text": "Question: {{question}}\nAnswer:",
                         "doc_to_target": "{{choices.label.index(answerKey)}}", "doc_to_choice": "{{choices.text}}",
                         "metric_list": _ACC_NORM}),
    StoryTask.PLACE: (_place, {"output_type": "multiple_choice", "doc_to_text": "Question: {{goal}}\nAnswer:",
                               "doc_to_target": "label", "doc_to_choice": "{{[sol1, sol2]}}", "metric_list": _ACC_NORM}),
    StoryTask.ENDING: (_ending, {"output_type": "multiple_choice", "doc_to_text": "{{ctx}}",
                                 "doc_to_target": "{{label}}", "doc_to_choice": "endings", "metric_list": _ACC_NORM}),
    StoryTask.CLOZE: (_cloze, {"output_type": "loglikelihood", "doc_to_text": "{{text.split(' ')[:-1]|join(' ')}}",
                               "doc_to_target": "{{' '+text.split(' ')[-1]}}",
                               "metric_list": [{"metric": "perplexity", "aggregation": "perplexity",
                                                "higher_is_better": False}, *_ACC]}),
    StoryTask.TEXT: (_text, {"output_type": "loglikelihood_rolling", "doc_to_text": "", "doc_to_target": "{{text}}",
                             "metric_list": [{"metric": m, "aggregation": agg, "higher_is_better": False}
                                             for m, agg in (("word_perplexity", "weighted_perplexity"),
                                                            ("byte_perplexity", "weighted_perplexity"),
                                                            ("bits_per_byte", "bits_per_byte"))]}),
}


def story_task_docs(task: StoryTask, config: StoryTasksConfig = StoryTasksConfig()) -> list[dict[str, Any]]:
    """The documents of ``task`` (as its JSON lines hold them)."""
    build = _TASKS[StoryTask(task)][0]
    return [build(config.seed, config.first_index + i) for i in range(config.num_docs)]


def write_story_tasks(folder: str, config: StoryTasksConfig = StoryTasksConfig()) -> dict[str, str]:
    """Write ``<folder>/<task>.yaml`` and ``<task>.jsonl`` for each of ``config.tasks``.

    Returns:
        Task name -> the path of its YAML file (pass them, or ``folder`` as an include path, to
        ``levanter.eval_harness.run_tasks``).
    """
    written = {}
    for task in config.tasks:
        docs = story_task_docs(task, config)
        data = f"{task.value}.jsonl"
        fs.atomic_write(fs.join(folder, data), "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))
        spec = {"task": task.value, "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": data}},
                "test_split": "test", **_TASKS[task][1],
                "metadata": {"version": 1.0, "story_seed": config.seed, "first_index": config.first_index,
                             "num_docs": config.num_docs}}
        path = fs.join(folder, f"{task.value}.yaml")
        fs.atomic_write(path, yaml.safe_dump(spec, sort_keys=False, allow_unicode=True, width=1000))
        written[task.value] = path
    return written


def story_tasks_step(config: StoryTasksConfig, output_path: str) -> None:
    """Step function: write the tasks of ``config`` into the step's output."""
    write_story_tasks(output_path, config)


class StoryTasks(StepHandle, fn=story_tasks_step):
    """Handle to a step writing story tasks; its output holds ``<task>.yaml`` and ``<task>.jsonl`` per task."""

    def task(self, task: StoryTask | str) -> OutputPath:
        """The YAML file of one of its tasks (``StoryTask.QA`` or ``"story_qa"``)."""
        chosen = StoryTask(task)
        if chosen not in self.config.tasks:
            raise ValueError(f"{self.name} does not write {chosen.value!r}; it writes "
                             f"{[t.value for t in self.config.tasks]}")
        return output_path_of(self, f"{chosen.value}.yaml")

    def task_files(self) -> tuple[OutputPath, ...]:
        """The YAML file of every task it writes, in its config's order."""
        return tuple(self.task(t) for t in self.config.tasks)


def story_tasks(name: str = "tasks/story", *, seed: int = 0, num_docs: int = 200, first_index: int = 1_000_000,
                tasks: tuple[StoryTask | str, ...] = tuple(StoryTask), version: str = "v1") -> StoryTasks:
    """A step writing harness tasks generated from the bundled stories (see :class:`StoryTasksConfig`)."""
    return StoryTasks(name=name, config=StoryTasksConfig(seed=seed, num_docs=num_docs, first_index=first_index,
                                                        tasks=tuple(StoryTask(t) for t in tasks)),
                      version=version)


# Moved from story_task.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.story_task")
