"""What an experiment file uses, in one place: ``from marin.experiment import train_lm, tokenized, ...``.

Handles for data (the bundled corpus, trained tokenizers, tokenized text and chats), data curation
(``html_to_text``, ``dedup``, ``classify``, ``decontaminate``, ``consolidate``, ...), training
(``train_lm``, ``checkpoint``, with ``lora=LoraConfig(...)`` and ``ema=``), post-training
(``preference_chat``, ``story_preferences``, ``reference_logprobs``, ``dpo``, ``merge_checkpoints``,
``merge_lora``), evaluation (``evaluate``, ``story_tasks``, ``eval_report``), generation (``generations``, ``judged_pairs``, ``SamplingParams``) and export, the best trial of a sweep (``best``; ``sweep`` itself is
:func:`marin.experiment.sweeps.sweep.sweep`: the name is its module's), the mixture a sweep's fit
proposes (``mixture_fit``) and scaling ladders (``isoflop``).
They live in subpackages by idea: :mod:`~marin.experiment.data`, :mod:`~marin.experiment.datakit`,
:mod:`~marin.experiment.training`, :mod:`~marin.experiment.evaluation`, :mod:`~marin.experiment.tasks`,
:mod:`~marin.experiment.chat`, :mod:`~marin.experiment.posttrain`, :mod:`~marin.experiment.sweeps`, :mod:`~marin.experiment.scaling`, and
:mod:`~marin.experiment.hf`; this package re-exports the names experiment files write, as optax
re-exports its transforms. The flat modules of earlier versions (``marin.experiment.train``,
``marin.experiment.eval``, ``marin.experiment.sweep``, ...) still import, as the same modules: what
they define keeps those names as its identity in step hashes.

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
    from levanter.ema import EmaConfig
    from levanter.inference.sampling import SamplingParams
    from levanter.lora import LoraConfig
    from marin.execution.core.placeholders import output_path_of
    from marin.execution.core.step import Step
    from marin.execution.run.runner import StepRunner
    from marin.experiment.chat.data import tokenized_chat
    from marin.experiment.chat.template import DEFAULT_CHAT_TEMPLATE, ChatTemplate
    from marin.experiment.data import bundled_corpus, tokenized, trained_tokenizer
    from marin.experiment.data.sources import source
    from marin.experiment.datakit import (
        classify,
        consolidate,
        decontaminate,
        dedup,
        heuristics,
        html_to_text,
        keep,
        keep_languages,
        language_id,
        pii,
        quality_classifier,
        url_filter,
        web_corpus,
        web_crawl,
    )
    from marin.experiment.evaluation.eval import eval_data, evaluate
    from marin.experiment.evaluation.table import eval_report
    from marin.experiment.generation.judged import judged_pairs
    from marin.experiment.generation.steps import generations
    from marin.experiment.hf import export_hf, hf_checkpoint
    from marin.experiment.posttrain.data import preference_chat, preference_data
    from marin.experiment.posttrain.dpo import dpo
    from marin.experiment.posttrain.merge import merge_checkpoints, merge_lora
    from marin.experiment.posttrain.reference import reference_logprobs
    from marin.experiment.scaling import isoflop
    from marin.experiment.sweeps.mixture_fit import mixture_fit
    from marin.experiment.sweeps.sweep import best
    from marin.experiment.tasks.story import story_tasks
    from marin.experiment.tasks.story_chat import story_chats
    from marin.experiment.tasks.story_preferences import story_preferences
    from marin.experiment.tasks.word_problems import word_problems
    from marin.experiment.training.train import FINAL, checkpoint, train_lm

# Each name is imported from its module when first used: importing this package loads nothing
# else (a script that only builds steps never imports JAX, whose threads a warm worker must not inherit).
_WHERE = {
    "output_path_of": "marin.execution.core.placeholders",
    "Step": "marin.execution.core.step",
    "StepRunner": "marin.execution.run.runner",
    "tokenized_chat": "marin.experiment.chat.data",
    "DEFAULT_CHAT_TEMPLATE": "marin.experiment.chat.template",
    "ChatTemplate": "marin.experiment.chat.template",
    "bundled_corpus": "marin.experiment.data",
    "tokenized": "marin.experiment.data",
    "trained_tokenizer": "marin.experiment.data",
    "source": "marin.experiment.data.sources",
    "classify": "marin.experiment.datakit",
    "consolidate": "marin.experiment.datakit",
    "decontaminate": "marin.experiment.datakit",
    "dedup": "marin.experiment.datakit",
    "heuristics": "marin.experiment.datakit",
    "html_to_text": "marin.experiment.datakit",
    "keep": "marin.experiment.datakit",
    "keep_languages": "marin.experiment.datakit",
    "language_id": "marin.experiment.datakit",
    "pii": "marin.experiment.datakit",
    "quality_classifier": "marin.experiment.datakit",
    "url_filter": "marin.experiment.datakit",
    "web_corpus": "marin.experiment.datakit",
    "web_crawl": "marin.experiment.datakit",
    "eval_data": "marin.experiment.evaluation.eval",
    "evaluate": "marin.experiment.evaluation.eval",
    "eval_report": "marin.experiment.evaluation.table",
    "generations": "marin.experiment.generation.steps",
    "judged_pairs": "marin.experiment.generation.judged",
    "SamplingParams": "levanter.inference.sampling",
    # As marin.experiment.posttrain's own map says: listed here again because importing this package
    # loads no subpackage (tested), and that package's submodules dpo and merge shadow its names.
    "EmaConfig": "levanter.ema",
    "LoraConfig": "levanter.lora",
    "preference_chat": "marin.experiment.posttrain.data",
    "preference_data": "marin.experiment.posttrain.data",
    "dpo": "marin.experiment.posttrain.dpo",
    "merge_checkpoints": "marin.experiment.posttrain.merge",
    "merge_lora": "marin.experiment.posttrain.merge",
    "reference_logprobs": "marin.experiment.posttrain.reference",
    "story_preferences": "marin.experiment.tasks.story_preferences",
    "export_hf": "marin.experiment.hf",
    "hf_checkpoint": "marin.experiment.hf",
    "isoflop": "marin.experiment.scaling",
    "story_chats": "marin.experiment.tasks.story_chat",
    "story_tasks": "marin.experiment.tasks.story",
    "word_problems": "marin.experiment.tasks.word_problems",
    "best": "marin.experiment.sweeps.sweep",
    "mixture_fit": "marin.experiment.sweeps.mixture_fit",
    "FINAL": "marin.experiment.training.train",
    "checkpoint": "marin.experiment.training.train",
    "train_lm": "marin.experiment.training.train",
}

__all__ = [
    "DEFAULT_CHAT_TEMPLATE",
    "FINAL",
    "ChatTemplate",
    "EmaConfig",
    "LoraConfig",
    "SamplingParams",
    "Step",
    "StepRunner",
    "best",
    "bundled_corpus",
    "checkpoint",
    "classify",
    "consolidate",
    "decontaminate",
    "dedup",
    "dpo",
    "eval_data",
    "eval_report",
    "evaluate",
    "export_hf",
    "generations",
    "heuristics",
    "hf_checkpoint",
    "html_to_text",
    "isoflop",
    "judged_pairs",
    "keep",
    "keep_languages",
    "language_id",
    "merge_checkpoints",
    "merge_lora",
    "mixture_fit",
    "output_path_of",
    "pii",
    "preference_chat",
    "preference_data",
    "quality_classifier",
    "reference_logprobs",
    "source",
    "story_chats",
    "story_preferences",
    "story_tasks",
    "tokenized",
    "tokenized_chat",
    "train_lm",
    "trained_tokenizer",
    "url_filter",
    "web_corpus",
    "web_crawl",
    "word_problems",
]


__getattr__ = lazy_getattr(__name__, _WHERE)


def __dir__() -> list[str]:
    return sorted(__all__)
