"""What an experiment file uses, in one place: ``from marin.experiment import train_lm, tokenized, ...``.

Handles for data (the bundled corpus, trained tokenizers, tokenized text and chats), data curation
(``html_to_text``, ``dedup``, ``classify``, ``decontaminate``, ``consolidate``, ...), training
(``train_lm``, ``checkpoint``), evaluation (``evaluate``, ``story_tasks``, ``eval_report``) and
export, the best trial of a sweep (``best``; ``sweep`` itself is
:func:`marin.experiment.sweep.sweep`: the name is its module's) and scaling ladders (``isoflop``).
Each lives in a module of its own (:mod:`marin.experiment.data`, :mod:`~marin.experiment.train`,
...); this package re-exports the names experiment files write, as optax re-exports its transforms.

An experiment file exposes its steps as a module-level ``steps`` list::

    steps = [model]

``marin run FILE`` builds them (and the steps they read). A function returning the list
(``marin run FILE:make_steps``), steps built at module level, or a ``__main__`` block that calls
``executor_main(...)`` or ``StepRunner().run(...)`` work too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rigging.lazy import lazy_getattr

if TYPE_CHECKING:
    from marin.execution.core.placeholders import output_path_of
    from marin.execution.core.step import Step
    from marin.execution.run.runner import StepRunner
    from marin.experiment.chat_data import tokenized_chat
    from marin.experiment.chat_template import DEFAULT_CHAT_TEMPLATE, ChatTemplate
    from marin.experiment.data import bundled_corpus, tokenized, trained_tokenizer
    from marin.experiment.datakit import (
        classify,
        consolidate,
        decontaminate,
        dedup,
        heuristics,
        html_to_text,
        keep,
        quality_classifier,
        web_corpus,
    )
    from marin.experiment.eval import eval_data, evaluate
    from marin.experiment.eval_table import eval_report
    from marin.experiment.hf import export_hf, hf_checkpoint
    from marin.experiment.scaling import isoflop
    from marin.experiment.story_chat import story_chats
    from marin.experiment.story_task import story_tasks
    from marin.experiment.sweep import best
    from marin.experiment.train import FINAL, checkpoint, train_lm

# Each name is imported from its module when first used: importing this package loads nothing
# else (a script that only builds steps never imports JAX, whose threads a warm worker must not inherit).
_WHERE = {
    "output_path_of": "marin.execution.core.placeholders",
    "Step": "marin.execution.core.step",
    "StepRunner": "marin.execution.run.runner",
    "tokenized_chat": "marin.experiment.chat_data",
    "DEFAULT_CHAT_TEMPLATE": "marin.experiment.chat_template",
    "ChatTemplate": "marin.experiment.chat_template",
    "bundled_corpus": "marin.experiment.data",
    "tokenized": "marin.experiment.data",
    "trained_tokenizer": "marin.experiment.data",
    "classify": "marin.experiment.datakit",
    "consolidate": "marin.experiment.datakit",
    "decontaminate": "marin.experiment.datakit",
    "dedup": "marin.experiment.datakit",
    "heuristics": "marin.experiment.datakit",
    "html_to_text": "marin.experiment.datakit",
    "keep": "marin.experiment.datakit",
    "quality_classifier": "marin.experiment.datakit",
    "web_corpus": "marin.experiment.datakit",
    "eval_data": "marin.experiment.eval",
    "evaluate": "marin.experiment.eval",
    "eval_report": "marin.experiment.eval_table",
    "export_hf": "marin.experiment.hf",
    "hf_checkpoint": "marin.experiment.hf",
    "isoflop": "marin.experiment.scaling",
    "story_chats": "marin.experiment.story_chat",
    "story_tasks": "marin.experiment.story_task",
    "best": "marin.experiment.sweep",
    "FINAL": "marin.experiment.train",
    "checkpoint": "marin.experiment.train",
    "train_lm": "marin.experiment.train",
}

__all__ = [
    "DEFAULT_CHAT_TEMPLATE",
    "FINAL",
    "ChatTemplate",
    "Step",
    "StepRunner",
    "best",
    "bundled_corpus",
    "checkpoint",
    "classify",
    "consolidate",
    "decontaminate",
    "dedup",
    "eval_data",
    "eval_report",
    "evaluate",
    "export_hf",
    "heuristics",
    "hf_checkpoint",
    "html_to_text",
    "isoflop",
    "keep",
    "output_path_of",
    "quality_classifier",
    "story_chats",
    "story_tasks",
    "tokenized",
    "tokenized_chat",
    "train_lm",
    "trained_tokenizer",
    "web_corpus",
]


__getattr__ = lazy_getattr(__name__, _WHERE)


def __dir__() -> list[str]:
    return sorted(__all__)
