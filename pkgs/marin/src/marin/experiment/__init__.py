"""What an experiment file uses, in one place: ``from marin.experiment import train_lm, tokenized, ...``.

Handles for data (the bundled corpus, trained tokenizers, tokenized text and chats), training
(``train_lm``, ``checkpoint``), evaluation (``evaluate``, ``story_tasks``, ``eval_report``) and
export. Each lives in a module of its own (:mod:`marin.experiment.data`,
:mod:`~marin.experiment.train`, ...); this package re-exports the names experiment files write,
as optax re-exports its transforms.

An experiment file exposes its steps as a module-level ``steps`` list::

    steps = [model]

``marin run FILE`` builds them (and the steps they read). A function returning the list
(``marin run FILE:make_steps``), steps built at module level, or a ``__main__`` block that calls
``executor_main(...)`` or ``StepRunner().run(...)`` work too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from marin.execution.core.placeholders import output_path_of
    from marin.execution.core.step import Step
    from marin.execution.run.runner import StepRunner
    from marin.experiment.chat_data import tokenized_chat
    from marin.experiment.chat_template import DEFAULT_CHAT_TEMPLATE, ChatTemplate
    from marin.experiment.data import bundled_corpus, tokenized, trained_tokenizer
    from marin.experiment.eval import eval_data, evaluate
    from marin.experiment.eval_report import eval_report
    from marin.experiment.hf import export_hf, hf_checkpoint
    from marin.experiment.story_chat import story_chats
    from marin.experiment.story_task import story_tasks
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
    "eval_data": "marin.experiment.eval",
    "evaluate": "marin.experiment.eval",
    "eval_report": "marin.experiment.eval_report",
    "export_hf": "marin.experiment.hf",
    "hf_checkpoint": "marin.experiment.hf",
    "story_chats": "marin.experiment.story_chat",
    "story_tasks": "marin.experiment.story_task",
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
    "bundled_corpus",
    "checkpoint",
    "eval_data",
    "eval_report",
    "evaluate",
    "export_hf",
    "hf_checkpoint",
    "output_path_of",
    "story_chats",
    "story_tasks",
    "tokenized",
    "tokenized_chat",
    "train_lm",
    "trained_tokenizer",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
