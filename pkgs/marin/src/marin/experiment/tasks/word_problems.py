"""A generative benchmark generated here: arithmetic word problems laid out as GSM8K is.

Each document is a short problem about a person and things they have, buy, give away or pack, and
an answer that works it out and ends with ``#### <number>``; the harness asks the model to go on
after ``Question: ...\\nAnswer:``, cuts its text at the next question, takes the number after
``####`` (GSM8K's strict filter) and scores exact match. A few worked problems from the ``train``
split go before each question (``num_fewshot``). The same settings write the same bytes.

``word_problems(name)`` is the step that writes the task (content-hashed like any step); pass
``.task_file()`` to ``evaluate(..., tasks=...)`` or ``levanter.eval_harness.run_tasks``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from marin.execution.core.lazy import StepHandle
from marin.execution.core.placeholders import OutputPath, output_path_of
from rigging import filesystem as fs

__all__ = ["TASK_NAME", "WordProblems", "WordProblemsConfig", "word_problem", "word_problems",
           "word_problems_step", "write_word_problems"]

TASK_NAME = "word_problems"
"""The harness task's name (and its YAML file's stem)."""

_NAMES = ("Ada", "Ben", "Cleo", "Dev", "Emma", "Finn", "Gia", "Hugo", "Ines", "Jon", "Kira", "Leo", "Mia", "Noor")
_THINGS = ("apples", "marbles", "stickers", "pencils", "cookies", "shells", "stamps", "cards", "books", "coins")


def _add(rng: random.Random, who: str, what: str) -> tuple[str, str, int]:
    a, b = rng.randint(2, 40), rng.randint(2, 40)
    return (f"{who} has {a} {what}. {who} gets {b} more {what}. How many {what} does {who} have now?",
            f"{who} has {a} + {b} = {a + b} {what}.", a + b)


def _subtract(rng: random.Random, who: str, what: str) -> tuple[str, str, int]:
    a = rng.randint(10, 60)
    b = rng.randint(1, a - 1)
    return (f"{who} has {a} {what}. {who} gives away {b} {what}. How many {what} does {who} have left?",
            f"{who} has {a} - {b} = {a - b} {what} left.", a - b)


def _multiply(rng: random.Random, who: str, what: str) -> tuple[str, str, int]:
    boxes, each = rng.randint(2, 9), rng.randint(2, 12)
    return (f"{who} has {boxes} boxes with {each} {what} in each box. How many {what} does {who} have?",
            f"{who} has {boxes} * {each} = {boxes * each} {what}.", boxes * each)


def _two_steps(rng: random.Random, who: str, what: str) -> tuple[str, str, int]:
    boxes, each, extra = rng.randint(2, 6), rng.randint(2, 10), rng.randint(1, 20)
    total = boxes * each
    return (f"{who} buys {boxes} bags of {what} with {each} {what} in each bag, then finds {extra} more {what}. "
            f"How many {what} does {who} have?",
            f"The bags hold {boxes} * {each} = {total} {what}. With the ones found, {who} has {total} + {extra} = "
            f"{total + extra} {what}.", total + extra)


_KINDS: tuple[Callable[[random.Random, str, str], tuple[str, str, int]], ...] = (_add, _subtract, _multiply, _two_steps)


def word_problem(seed: int, split: str, index: int) -> dict[str, Any]:
    """Document ``index`` of ``split``: ``{"id", "question", "answer"}`` (the answer ends ``#### <n>``)."""
    rng = random.Random(f"word-problems:{seed}:{split}:{index}")
    question, working, value = rng.choice(_KINDS)(rng, rng.choice(_NAMES), rng.choice(_THINGS))
    return {"id": index, "question": question, "answer": f"{working}\n#### {value}"}


@dataclass(frozen=True)
class WordProblemsConfig:
    """What the task holds and how the harness asks for answers (all of it changes the scores)."""

    seed: int = 0
    """Seed of the generator."""
    num_docs: int = 100
    """Problems asked (the ``test`` split)."""
    num_fewshot: int = 3
    """Worked problems from the ``train`` split before each question."""
    max_gen_toks: int = 48
    """Most tokens of an answer."""
    do_sample: bool = False
    """Draw answers (with ``temperature`` and the harness's per-request seeds) instead of greedy."""
    temperature: float = 1.0
    """Temperature of drawn answers."""
    repeats: int = 1
    """Answers drawn per question (with ``do_sample``; the first is scored)."""

    def __post_init__(self) -> None:
        for name, least in (("num_docs", 1), ("num_fewshot", 0), ("max_gen_toks", 1), ("repeats", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
        if not isinstance(self.temperature, int | float) or self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature!r}")
        if self.repeats > 1 and not self.do_sample:
            raise ValueError(f"repeats={self.repeats} draws the same greedy answer each time: set do_sample=True")


def _spec(config: WordProblemsConfig, test: str, train: str) -> dict[str, Any]:
    generation: dict[str, Any] = {"until": ["Question:", "\n\n"], "do_sample": config.do_sample,
                                  "max_gen_toks": config.max_gen_toks}
    if config.do_sample:
        generation["temperature"] = config.temperature
    return {"task": TASK_NAME, "dataset_path": "json",
            "dataset_kwargs": {"data_files": {"train": train, "test": test}},
            "training_split": "train", "test_split": "test", "fewshot_split": "train",
            "fewshot_config": {"sampler": "first_n"}, "num_fewshot": config.num_fewshot,
            "output_type": "generate_until", "doc_to_text": "Question: {{question}}\nAnswer:",
            "doc_to_target": "{{answer}}", "target_delimiter": " ", "fewshot_delimiter": "\n\n",
            "generation_kwargs": generation, "repeats": config.repeats,
            "filter_list": [{"name": "strict-match", "filter": [
                {"function": "regex", "regex_pattern": "#### (\\-?[0-9\\.\\,]+)"}, {"function": "take_first"}]}],
            "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                             "ignore_case": True, "ignore_punctuation": False,
                             "regexes_to_ignore": [",", "\\$", "(?s).*#### ", "\\.$"]}],
            "metadata": {"version": 1.0, "seed": config.seed, "num_docs": config.num_docs}}


def write_word_problems(folder: str, config: WordProblemsConfig = WordProblemsConfig()) -> str:
    """Write ``<folder>/word_problems.yaml`` and its two splits' JSON lines; returns the YAML's path."""
    splits = {"test": config.num_docs, "train": max(config.num_fewshot, 1)}
    files = {}
    for split, count in splits.items():
        files[split] = f"{TASK_NAME}_{split}.jsonl"
        docs = [word_problem(config.seed, split, i) for i in range(count)]
        fs.atomic_write(fs.join(folder, files[split]), "".join(json.dumps(d) + "\n" for d in docs))
    path = fs.join(folder, f"{TASK_NAME}.yaml")
    spec = _spec(config, files["test"], files["train"])
    fs.atomic_write(path, yaml.safe_dump(spec, sort_keys=False, allow_unicode=True, width=1000))
    return path


def word_problems_step(config: WordProblemsConfig, output_path: str) -> None:
    """Step function: write the task of ``config`` into the step's output."""
    write_word_problems(output_path, config)


class WordProblems(StepHandle, fn=word_problems_step):
    """Handle to a step writing the word-problem task; its output holds ``word_problems.yaml`` and its data."""

    def task_file(self) -> OutputPath:
        """The task's YAML file."""
        return output_path_of(self, f"{TASK_NAME}.yaml")

    def task_files(self) -> tuple[OutputPath, ...]:
        """The YAML file of every task it writes (one)."""
        return (self.task_file(),)


def word_problems(name: str = "tasks/word-problems", *, version: str = "v1", **settings: Any) -> WordProblems:
    """A step writing the arithmetic word-problem task (settings: the fields of :class:`WordProblemsConfig`)."""
    return WordProblems(name=name, config=WordProblemsConfig(**settings), version=version)
