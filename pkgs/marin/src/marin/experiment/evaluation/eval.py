"""``evaluate()``: a lazy handle to an evaluation of one checkpoint of a trained model.

The step reads exactly the checkpoint it names: its key holds the training step's hash and the
checkpoint (``"final"`` or a step number), never "whatever is newest now". A new checkpoint of the
same model is a new eval step; the same one is cached. Results are ``eval_results.json`` in the
step's output (format :data:`EVAL_FORMAT`, :mod:`marin.experiment.evaluation.results`).

With ``datasets`` alone it is one step scoring loss, perplexity and bits per byte. With ``tasks``
each benchmark task is a step of its own, shared with every other evaluation of the same
checkpoint and task (:mod:`marin.experiment.evaluation.tasks`), the datasets' scores are a step named
``<name>/losses``, and the step ``<name>`` gathers them: adding a task runs only that task.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from levanter.eval_harness.config import HarnessConfig
from levanter.eval_harness.scores import RESULTS_FILE, task_scores
from marin.execution.core.identity import keep_identities
from marin.execution.core.lazy import Lazy, StepHandle, lower
from marin.execution.core.placeholders import OutputPath
from marin.execution.core.sources import Source
from marin.execution.core.step import Step
from marin.execution.core.traits import ON_ACCELERATOR, step_function
from marin.experiment.evaluation.results import (
    EVAL_FORMAT,
    EVAL_RESULTS_FILE,
    EvalResults,
    read_eval_results,
    write_eval_results,
)
from marin.experiment.evaluation.tasks import check_checkpoint, task_evals
from marin.experiment.results import TRAIN_SUMMARY_FILE
from marin.experiment.training.models import FINAL, check_checkpoint_kept, final_only, training_config
from rigging import filesystem as fs
from rigging.fields import added_field

__all__ = [
    "EVAL_FORMAT",
    "EVAL_RESULTS_FILE",
    "EvalConfig",
    "EvalData",
    "EvalDataKind",
    "EvalSummary",
    "EvalSummaryConfig",
    "Evaluate",
    "eval_summary_step",
    "evaluate",
    "evaluate_step",
    "writes_eval_results",
]



class EvalDataKind(enum.Enum):
    """What an eval dataset is: tokenized shards (their validation split) or raw text (all of it)."""

    TOKENIZED = "tokenized"
    RAW_TEXT = "raw text"


@dataclass(frozen=True)
class EvalData:
    """One labelled body of held-out text."""

    label: str
    """Name of the column in results and reports."""
    data: Any
    """A tokenize step or handle (its ``split``), or a raw text source: a path, glob, URL, a step
    whose output holds text files, or a path in one (``output_path_of``), tokenized with the model's
    own tokenizer."""
    kind: EvalDataKind
    """How ``data`` is read."""
    split: str = "validation"
    """The split of tokenized data that is scored (raw text is scored whole)."""
    text_field: str = "text"
    """Field holding the text in JSON lines and Parquet (raw text only)."""

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label.strip():
            raise ValueError(f"eval dataset label must be a non-empty string, got {self.label!r}")
        if isinstance(self.kind, str):
            object.__setattr__(self, "kind", EvalDataKind(self.kind))


@dataclass(frozen=True)
class EvalConfig:
    """What an eval step scores: one checkpoint of one training step on labelled datasets."""

    model: Any
    """The training step (a placeholder resolved to its output folder)."""
    checkpoint: int | str
    """``"final"`` (the final parameters) or the step number of a kept checkpoint."""
    datasets: tuple[EvalData, ...]
    """The labelled datasets."""
    seq_len: int
    """Context of each scored window."""
    batch_size: int = 8
    """Windows scored at once (does not change the scores)."""
    max_eval_tokens: int | None = None
    """Score at most about this many tokens of each dataset (None: all of it)."""
    ema: bool = added_field(default=False)
    """Score the run's average of its parameters (``ema=`` of its training) instead of the parameters."""

    def __post_init__(self) -> None:
        check_checkpoint(self.checkpoint)
        if not isinstance(self.datasets, tuple):
            object.__setattr__(self, "datasets", tuple(self.datasets))
        if not self.datasets:
            raise ValueError("datasets must name at least one eval dataset, got none")
        labels = [d.label for d in self.datasets]
        if len(set(labels)) != len(labels):
            raise ValueError(f"eval dataset labels must be distinct, got {labels}")
        for name in ("seq_len", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.max_eval_tokens is not None and (not isinstance(self.max_eval_tokens, int) or self.max_eval_tokens <= 0):
            raise ValueError(f"max_eval_tokens must be a positive int or None, got {self.max_eval_tokens!r}")


def _trained_steps(model_output: str) -> int | None:
    path = fs.join(model_output, TRAIN_SUMMARY_FILE)
    if not fs.exists(path):
        return None
    steps = json.loads(fs.read_text(path)).get("steps")
    return steps if isinstance(steps, int) else None


def _tokenized_raw_text(data: EvalData, tokenizer_path: str, scratch: str) -> str:
    """Tokenize a raw text source with the model's tokenizer into ``scratch``; all of it lands in ``train``."""
    from marin.experiment.data.sources import resolve_source
    from marin.experiment.data.tokenize import tokenize_to_shards

    source = resolve_source(data.data) if isinstance(data.data, str) else data.data
    tokenize_to_shards(source, tokenizer_path, scratch, validation_fraction=0.0, text_field=data.text_field)
    return scratch


def _grown(model_config: Any, params: Any, data_tokenizer: str) -> tuple[Any, Any, Any]:
    """The model as a fine-tune on data tokenized with ``data_tokenizer`` (the model's tokenizer
    plus new special tokens) would start: vocabulary grown, old rows kept (``levanter.models.vocab``)."""
    import dataclasses

    from levanter.eval import token_byte_lengths
    from levanter.models.vocab import extend_vocab

    byte_lengths = token_byte_lengths(data_tokenizer)
    vocab = len(byte_lengths)
    return dataclasses.replace(model_config, vocab_size=vocab), extend_vocab(params, vocab), byte_lengths


@step_function(ON_ACCELERATOR)  # it runs the model
def evaluate_step(config: EvalConfig, output_path: str) -> None:
    """Step function: score the checkpoint on every dataset and write ``eval_results.json``."""
    import os
    import tempfile

    from levanter.eval import evaluate_split, read_tokenizer_json, token_byte_lengths, vocabulary_extends
    from levanter.generate import load_model

    model_output = str(config.model)
    step = None if config.checkpoint == FINAL else int(config.checkpoint)
    model_config, params = load_model(model_output, step, ema=config.ema)
    tokenizer_json = read_tokenizer_json(model_output)
    byte_lengths = token_byte_lengths(tokenizer_json)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="marin-eval-") as scratch:
        tokenizer_path = os.path.join(scratch, "tokenizer.json")
        with open(tokenizer_path, "w", encoding="utf-8") as f:
            f.write(tokenizer_json)
        for i, data in enumerate(config.datasets):
            scored = (model_config, params, byte_lengths)
            if data.kind is EvalDataKind.TOKENIZED:
                path, split = str(data.data), data.split
                data_tokenizer = read_tokenizer_json(path)
                if data_tokenizer != tokenizer_json:
                    if vocabulary_extends(tokenizer_json, data_tokenizer):  # chat data for a pretrained model
                        scored = _grown(model_config, params, data_tokenizer)
                    elif not vocabulary_extends(data_tokenizer, tokenizer_json):  # else: plain text for a fine-tune
                        raise ValueError(f"eval dataset {data.label!r} ({path}) was tokenized with another tokenizer "
                                         f"than the model {model_output}; pass the raw text instead, to be tokenized "
                                         "with the model's")
            else:
                path, split = _tokenized_raw_text(data, tokenizer_path, os.path.join(scratch, f"raw-{i}")), "train"
            scores = evaluate_split(scored[0], scored[1], path, split, seq_len=config.seq_len,
                                    batch_size=config.batch_size, byte_lengths=scored[2],
                                    max_tokens=config.max_eval_tokens)
            results[data.label] = {"kind": data.kind.value, **scores.to_json()}
            print(f"eval {data.label}: loss {scores.loss:.4f}, perplexity {scores.perplexity:.3f}, "
                  f"bits/byte {scores.bits_per_byte:.4f} over {scores.tokens} tokens")
    write_eval_results(output_path, EvalResults(
        model=model_output, checkpoint=config.checkpoint, step=step if step is not None else _trained_steps(model_output),
        seq_len=config.seq_len, datasets=results))


class Evaluate(StepHandle, fn=evaluate_step):
    """Handle to an eval step; its output holds ``eval_results.json``."""


@dataclass(frozen=True)
class EvalSummaryConfig:
    """The results of one checkpoint's eval steps, gathered into one ``eval_results.json``."""

    model: Any
    """The training step (a placeholder resolved to its output folder)."""
    checkpoint: int | str
    """``"final"`` or the step number of the checkpoint."""
    losses: Any = None
    """The eval step scoring the datasets (``<name>/losses``), or None."""
    tasks: tuple[Any, ...] = ()
    """The task eval steps (``marin.experiment.evaluation.tasks.TaskEval``)."""

    def __post_init__(self) -> None:
        check_checkpoint(self.checkpoint)
        object.__setattr__(self, "tasks", tuple(self.tasks))
        if self.losses is None and not self.tasks:
            raise ValueError("an eval summary needs a losses step or task steps, got neither")


def eval_summary_step(config: EvalSummaryConfig, output_path: str) -> None:
    """Step function: read the datasets' scores and each task's lm-eval results; write ``eval_results.json``."""
    model_output = str(config.model)
    losses = None
    if config.losses is not None:
        losses = read_eval_results(str(config.losses))
        if losses is None:
            raise FileNotFoundError(f"{config.losses} holds no eval results")
    tasks, outputs = {}, {}
    for folder in map(str, config.tasks):
        for task, scores in task_scores(json.loads(fs.read_text(fs.join(folder, RESULTS_FILE)))).items():
            if task in tasks:
                raise ValueError(f"task {task!r} is scored by two of the task steps ({outputs[task]} and {folder}); "
                                 "ask for it once")
            tasks[task], outputs[task] = scores, folder
            shown = ", ".join(f"{m} {v:.4f}" for m, v in scores.metrics.items())
            print(f"{task}: {shown}")
    step = losses.step if losses is not None else (
        config.checkpoint if isinstance(config.checkpoint, int) else _trained_steps(model_output))
    write_eval_results(output_path, EvalResults(
        model=model_output, checkpoint=config.checkpoint, step=step, seq_len=losses.seq_len if losses else None,
        datasets=losses.datasets if losses else {}, tasks=tasks, task_outputs=outputs))


class EvalSummary(Evaluate, fn=eval_summary_step):
    """Handle to the step gathering an evaluation's results; its output holds ``eval_results.json``."""


def writes_eval_results(step: Step) -> bool:
    """Whether ``step`` writes ``eval_results.json`` (an ``evaluate(...)`` step)."""
    return isinstance(step.config, EvalConfig | EvalSummaryConfig)


def _is_tokenized(data: Any) -> bool:
    from marin.experiment.chat.data import TokenizedChat, tokenize_chat_step
    from marin.experiment.data import Tokenized, tokenize_step

    return isinstance(data, Tokenized | TokenizedChat) or (
        isinstance(data, Step) and data.fn in (tokenize_step, tokenize_chat_step))


def eval_data(label: str, data: Any, *, text_field: str = "text") -> EvalData:
    """Label ``data``: a tokenize step/handle (plain or chat) is scored on its validation split;
    anything else is raw text."""
    import os

    from marin.experiment.data.sources import as_source, is_hf_id

    if _is_tokenized(data):
        return EvalData(label=label, data=data, kind=EvalDataKind.TOKENIZED)
    if not isinstance(data, str | Source | Step | Lazy | OutputPath):
        raise ValueError(f"eval dataset {label!r}: expected a tokenized handle or a raw text source "
                         f"(a path, glob, URL, step or output_path_of(step, ...)), got {type(data).__name__}")
    if isinstance(data, str) and "://" not in data and not any(c in data for c in "*?[") \
            and not os.path.exists(data) and not is_hf_id(data):
        raise ValueError(f"eval dataset {label!r}: {data!r} is not a tokenized handle, a step, an existing path, "
                         "a URL or a Hugging Face dataset id (benchmark tasks go in tasks=[...])")
    return EvalData(label=label, data=as_source(data), kind=EvalDataKind.RAW_TEXT, text_field=text_field)


def evaluate(name: str, model: Any, datasets: Mapping[str, Any] | None = None, *, tasks: Any = None,
             checkpoint: int | str = FINAL, seq_len: int | None = None, batch_size: int = 8,
             max_eval_tokens: int | None = None, text_field: str = "text", num_fewshot: int | None = None,
             limit: int | float | None = None, harness: HarnessConfig | None = None, bootstrap_iters: int = 1000,
             ema: bool = False, version: str = "v1") -> Evaluate:
    """An evaluation of one checkpoint of ``model``: losses on ``datasets``, scores on benchmark ``tasks``.

    Args:
        name: the step's name (its output folder is ``<prefix>/<name>-<hash>``).
        model: a ``train_lm(...)`` handle (or its step).
        datasets: ``{label: data}``; data is a tokenized handle (scored on its validation split)
            or a raw text source (a path, glob, URL or a step whose output holds text files),
            tokenized with the model's own tokenizer and scored whole: loss, perplexity, bits per byte.
        tasks: benchmark tasks run through the lm-evaluation-harness, each a step of its own
            (``evals/<model name>/<task>``, shared by every evaluation asking for it): lm-eval
            task names (``"arc_easy"``; their data from the hub cache), paths of task YAML files
            with local data, or the tasks of a ``story_tasks(...)`` handle (all of them, or one
            by ``.task("story_qa")``).
        checkpoint: ``"final"`` or the step number of a checkpoint the training run keeps.
        seq_len: context of each scored window, and of the harness's rows when ``harness`` is not
            given (default: the model's training ``seq_len``).
        batch_size: windows (harness rows) scored at once (does not change the scores).
        max_eval_tokens: score at most about this many tokens per dataset (None: all).
        text_field: field holding the text of raw JSON-lines or Parquet sources.
        num_fewshot: few-shot examples per prompt of every task (None: each task's default).
        limit: documents per task: a count, or a share below 1.0 (None: all).
        harness: the harness's batch shape, context, end token and precision (default: ``seq_len``
            and ``batch_size`` above).
        bootstrap_iters: resamples for the standard errors of non-mean task metrics.
        ema: score the run's average of its parameters (it must train with ``ema=``) instead of
            the parameters; both can be evaluated.
        version: bump to re-evaluate when the evaluation code changed (the task steps have their own).

    Raises:
        ValueError: a bad argument, neither datasets nor tasks, or a checkpoint the training run
            never writes or does not keep.
    """

    train_config = training_config(model)
    final_only(model, checkpoint)
    if datasets is None and tasks is None:
        raise ValueError(f"evaluate {name!r}: give datasets={{label: data}}, tasks=[...] or both")
    if ema and train_config.trainer.ema is None:
        raise ValueError(f"evaluate {name!r}: ema=True, but {lower(model).name} trains without ema= (no average to score)")
    if datasets is not None and (not isinstance(datasets, Mapping) or not datasets):
        raise ValueError("datasets must be a non-empty mapping of label to dataset")
    if checkpoint != FINAL:
        check_checkpoint_kept(train_config, checkpoint)
        if checkpoint == train_config.trainer.num_train_steps:
            checkpoint = FINAL  # the same parameters: one key for them
    seq_len = seq_len if seq_len is not None else train_config.trainer.seq_len
    losses = None
    if datasets is not None:
        config = EvalConfig(
            model=model, checkpoint=checkpoint,
            datasets=tuple(eval_data(label, data, text_field=text_field) for label, data in datasets.items()),
            seq_len=seq_len, batch_size=batch_size, max_eval_tokens=max_eval_tokens, ema=ema)
        losses = Evaluate(name=name if tasks is None else f"{name}/losses", config=config, version=version)
        if tasks is None:
            return losses
    harness = harness if harness is not None else HarnessConfig(batch_size=batch_size, seq_len=seq_len)
    steps = task_evals(model, lower(model).name, checkpoint, tasks, harness=harness, num_fewshot=num_fewshot,
                       limit=limit, bootstrap_iters=bootstrap_iters, ema=ema)
    return EvalSummary(name=name, config=EvalSummaryConfig(model=model, checkpoint=checkpoint, losses=losses,
                                                           tasks=steps), version=version)


# Moved from eval.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.eval")
