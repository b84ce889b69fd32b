"""``evaluate()``: a lazy handle to an evaluation step of one checkpoint of a trained model.

The step reads exactly the checkpoint it names: its key holds the training step's hash and the
checkpoint (``"final"`` or a step number), never "whatever is newest now". A new checkpoint of the
same model is a new eval step; the same one is cached. Results are ``eval_results.json`` in the
step's output (format :data:`EVAL_FORMAT`).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from marin.execution.core.lazy import Lazy, StepHandle
from marin.execution.core.placeholders import OutputPath
from marin.execution.core.step import Step
from marin.experiment.results import EVAL_FORMAT, EVAL_RESULTS_FILE
from marin.experiment.train import FINAL

__all__ = [
    "EVAL_FORMAT",
    "EVAL_RESULTS_FILE",
    "EvalConfig",
    "EvalData",
    "EvalDataKind",
    "Evaluate",
    "evaluate",
    "evaluate_step",
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

    def __post_init__(self) -> None:
        checkpoint_ok = self.checkpoint == FINAL or (
            isinstance(self.checkpoint, int) and not isinstance(self.checkpoint, bool) and self.checkpoint > 0)
        if not checkpoint_ok:
            raise ValueError(f"checkpoint must be 'final' or a step number > 0, got {self.checkpoint!r}")
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
    from marin.experiment.train import TRAIN_SUMMARY_FILE
    from rigging import filesystem as fs

    path = fs.join(model_output, TRAIN_SUMMARY_FILE)
    if not fs.exists(path):
        return None
    steps = json.loads(fs.read_text(path)).get("steps")
    return steps if isinstance(steps, int) else None


def _tokenized_raw_text(data: EvalData, tokenizer_path: str, scratch: str) -> str:
    """Tokenize a raw text source with the model's tokenizer into ``scratch``; all of it lands in ``train``."""
    from marin.experiment.sources import resolve_source
    from marin.experiment.tokenize_impl import tokenize_to_shards

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


def evaluate_step(config: EvalConfig, output_path: str) -> None:
    """Step function: score the checkpoint on every dataset and write ``eval_results.json``."""
    import os
    import tempfile

    from levanter.eval import evaluate_split, read_tokenizer_json, token_byte_lengths, vocabulary_extends
    from levanter.generate import load_model
    from rigging import filesystem as fs

    model_output = str(config.model)
    step = None if config.checkpoint == FINAL else int(config.checkpoint)
    model_config, params = load_model(model_output, step)
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
    document = {
        "format": EVAL_FORMAT,
        "model": model_output,
        "checkpoint": config.checkpoint,
        "step": step if step is not None else _trained_steps(model_output),
        "seq_len": config.seq_len,
        "results": results,
    }
    fs.atomic_write(fs.join(output_path, EVAL_RESULTS_FILE), json.dumps(document, indent=2))


class Evaluate(StepHandle, fn=evaluate_step):
    """Handle to an eval step; its output holds ``eval_results.json``."""


def _is_tokenized(data: Any) -> bool:
    from marin.experiment.chat_data import TokenizedChat, tokenize_chat_step
    from marin.experiment.data import Tokenized, tokenize_step

    return isinstance(data, Tokenized | TokenizedChat) or (
        isinstance(data, Step) and data.fn in (tokenize_step, tokenize_chat_step))


def eval_data(label: str, data: Any, *, text_field: str = "text") -> EvalData:
    """Label ``data``: a tokenize step/handle (plain or chat) is scored on its validation split;
    anything else is raw text."""
    import os

    from marin.experiment.sources import is_hf_id, normalize_path

    if _is_tokenized(data):
        return EvalData(label=label, data=data, kind=EvalDataKind.TOKENIZED)
    if not isinstance(data, str | Step | Lazy | OutputPath):
        raise ValueError(f"eval dataset {label!r}: expected a tokenized handle or a raw text source "
                         f"(a path, glob, URL, step or output_path_of(step, ...)), got {type(data).__name__}")
    if isinstance(data, str) and "://" not in data and not any(c in data for c in "*?[") \
            and not os.path.exists(data) and not is_hf_id(data):
        raise ValueError(f"eval dataset {label!r}: {data!r} is not a tokenized handle, a step, an existing path, "
                         "a URL or a Hugging Face dataset id (eval harness tasks are not supported)")
    return EvalData(label=label, data=normalize_path(data), kind=EvalDataKind.RAW_TEXT, text_field=text_field)


def evaluate(name: str, model: Any, datasets: Mapping[str, Any], *, checkpoint: int | str = FINAL,
             seq_len: int | None = None, batch_size: int = 8, max_eval_tokens: int | None = None,
             text_field: str = "text", version: str = "v1") -> Evaluate:
    """An eval step: loss, perplexity and bits per byte of one checkpoint of ``model`` on ``datasets``.

    Args:
        name: the step's name (its output folder is ``<prefix>/<name>-<hash>``).
        model: a ``train_lm(...)`` handle (or its step).
        datasets: ``{label: data}``; data is a tokenized handle (scored on its validation split)
            or a raw text source (a path, glob, URL or a step whose output holds text files),
            tokenized with the model's own tokenizer and scored whole.
        checkpoint: ``"final"`` or the step number of a checkpoint the training run keeps.
        seq_len: context of each scored window (default: the model's training ``seq_len``).
        batch_size: windows scored at once (does not change the scores).
        max_eval_tokens: score at most about this many tokens per dataset (None: all).
        text_field: field holding the text of raw JSON-lines or Parquet sources.
        version: bump to re-evaluate when the evaluation code changed.

    Raises:
        ValueError: a bad argument, or a checkpoint the training run never writes or does not keep.
    """
    from marin.experiment.train import check_checkpoint_kept, final_only, training_config

    train_config = training_config(model)
    final_only(model, checkpoint)
    if not isinstance(datasets, Mapping) or not datasets:
        raise ValueError("datasets must be a non-empty mapping of label to dataset")
    if checkpoint != FINAL:
        check_checkpoint_kept(train_config, checkpoint)
        if checkpoint == train_config.trainer.num_train_steps:
            checkpoint = FINAL  # the same parameters: one key for them
    config = EvalConfig(
        model=model, checkpoint=checkpoint,
        datasets=tuple(eval_data(label, data, text_field=text_field) for label, data in datasets.items()),
        seq_len=seq_len if seq_len is not None else train_config.trainer.seq_len, batch_size=batch_size,
        max_eval_tokens=max_eval_tokens)
    return Evaluate(name=name, config=config, version=version)
