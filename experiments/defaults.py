"""Marin's ``default_tokenize`` and ``default_train``, thin over :func:`~marin.experiment.data.tokenized`
and :func:`~marin.experiment.training.train.train_lm`.

Every argument Marin's tutorials pass works; an argument or ``SimpleTrainConfig`` field this
project does not support is refused with an error naming it, never ignored.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from experiments.simple_train_config import SUPPORTED, SimpleTrainConfig
from levanter.data.text import TextLmDatasetFormat
from levanter.optim import AdamConfig, Schedule
from marin.execution.executor import InputName, VersionedValue, unwrap_versioned_value
from marin.execution.lazy import Lazy
from marin.execution.step import OutputPath, Step, output_path_of
from marin.experiment.data import Tokenized, tokenized
from marin.experiment.training.train import TrainLm, train_lm

__all__ = ["CORE_TASKS", "UnsupportedSetting", "default_tokenize", "default_train"]

__marin_helpers__ = True
"""Its functions build handles for their callers: a handle is said to be defined where one was
called (``marin plan`` names that line), not here (``marin.execution.core.sites``)."""


class UnsupportedSetting(ValueError):
    """A Marin argument or field this project does not support; the message names it."""


class _MarinDefault:
    """The default of an argument whose Marin default this project cannot honour (refused unless overridden)."""

    def __init__(self, what: str):
        self.what = what

    def __repr__(self) -> str:
        return f"<Marin's default: {self.what}>"


CORE_TASKS = _MarinDefault("CORE_TASKS (lm-eval-harness tasks)")
"""Marin's default evaluation tasks; not available here (pass ``eval_harness_tasks=[]``)."""


def _as_source(value: Any, what: str) -> Any:
    value = unwrap_versioned_value(value)
    if isinstance(value, InputName):
        if value.step is None:
            raise UnsupportedSetting(f"{what}: InputName.hardcoded({value.name!r}) is not supported; give a path")
        return output_path_of(value.step, value.name or "")
    if isinstance(value, str | Step | Lazy | OutputPath):
        return value
    raise UnsupportedSetting(f"{what}: {type(value).__name__} is not supported (give a dataset id, a path or a step)")


def default_tokenize(name: str, dataset: Any, tokenizer: Any, format: Any = TextLmDatasetFormat(),  # noqa: A002, B008
                     *, sample_count: int | VersionedValue[int] | None = None,
                     is_validation: bool = False) -> Tokenized:
    """Tokenize ``dataset`` (a Hugging Face id, a path, or a step) into ``tokenized/<name>``.

    Raises:
        UnsupportedSetting: a format other than ``TextLmDatasetFormat``, or ``is_validation=True``.
    """
    if not isinstance(format, TextLmDatasetFormat):
        raise UnsupportedSetting(f"default_tokenize(format={type(format).__name__}(...)): only TextLmDatasetFormat "
                                 "(raw text) is supported")
    if is_validation:
        raise UnsupportedSetting("default_tokenize(is_validation=True) is not supported: every tokenized dataset "
                                 "holds out its own validation share (by content hash)")
    return tokenized(os.path.join("tokenized", name), source=_as_source(dataset, "default_tokenize(dataset=...)"),
                     tokenizer=_as_source(tokenizer, "default_tokenize(tokenizer=...)"),
                     sample_count=unwrap_versioned_value(sample_count), text_field=format.text_key)


def _refuse_unsupported(config: SimpleTrainConfig) -> None:
    defaults = SimpleTrainConfig(resources=None, train_batch_size=1, num_train_steps=1, learning_rate=1.0)
    for f in dataclasses.fields(config):
        if f.name in SUPPORTED:
            continue
        value = getattr(config, f.name)
        if unwrap_versioned_value(value) != getattr(defaults, f.name):
            raise UnsupportedSetting(f"SimpleTrainConfig.{f.name}={value!r} is not supported by this project "
                                     f"(supported fields: {', '.join(sorted(SUPPORTED))})")


def _optimizer(config: SimpleTrainConfig) -> AdamConfig:
    if config.optimizer_config is not None:
        if not isinstance(config.optimizer_config, AdamConfig):
            raise UnsupportedSetting(f"SimpleTrainConfig.optimizer_config={type(config.optimizer_config).__name__}"
                                     "(...) is not supported (give an AdamConfig)")
        return config.optimizer_config
    fields = {"learning_rate": config.learning_rate}
    for name in ("weight_decay", "beta1", "beta2", "epsilon", "max_grad_norm", "warmup", "min_lr_ratio"):
        value = unwrap_versioned_value(getattr(config, name))
        if value is not None:
            fields[name] = value
    schedule = unwrap_versioned_value(config.lr_schedule)
    if schedule is not None and schedule not in {s.value for s in Schedule}:
        raise UnsupportedSetting(f"SimpleTrainConfig.lr_schedule={schedule!r} is not supported "
                                 f"(supported: {', '.join(s.value for s in Schedule)})")
    decay = unwrap_versioned_value(config.decay)
    if decay is not None:
        # Marin's `decay`: stay at the peak, then decay over the last `decay` of training in the
        # schedule's shape: this project's warmup-stable-decay schedule.
        shapes = {None: "linear", "linear": "linear", "cosine": "cosine", "wsd": None}
        if schedule not in shapes:
            raise UnsupportedSetting(f"SimpleTrainConfig.decay={decay!r} with lr_schedule={schedule!r} is not "
                                     "supported (use lr_schedule 'linear' or 'cosine' with decay)")
        fields["decay"] = decay
        if shapes[schedule] is not None:
            fields["decay_shape"] = shapes[schedule]
        schedule = "wsd"
    if schedule is not None:
        fields["schedule"] = schedule
    return AdamConfig(**{k: unwrap_versioned_value(v) for k, v in fields.items()})


def default_train(name: str, tokenized: Any, model_config: Any, train_config: SimpleTrainConfig,
                  tags: Sequence[str] = (), use_default_validation: bool = True,
                  eval_harness_tasks: Any = CORE_TASKS, wandb_name: str | None = None,
                  wandb_group: str | None = None, override_output_path: str | None = None,
                  trainer_mesh: Any = None) -> TrainLm:
    """Train ``model_config`` on ``tokenized`` into ``checkpoints/<name>`` with ``train_config``.

    ``tags`` and ``wandb_name`` (the run's name) are recorded with the run; ``wandb_group`` turns
    on Weights & Biases logging in that group (install ``levanter[wandb]``).

    Raises:
        UnsupportedSetting: naming the argument or ``SimpleTrainConfig`` field not supported:
            Marin's default validation sets (pass ``use_default_validation=False``), evaluation
            tasks (pass ``eval_harness_tasks=[]``), mixtures, output path overrides, meshes, and
            fields outside ``SUPPORTED``.
    """
    if use_default_validation:
        raise UnsupportedSetting("default_train(use_default_validation=True): Marin's default validation sets "
                                 "(Paloma, uncheatable evals) are not available; pass use_default_validation=False "
                                 "(each tokenized dataset holds out its own validation share)")
    if isinstance(eval_harness_tasks, _MarinDefault) or eval_harness_tasks:
        raise UnsupportedSetting(f"default_train(eval_harness_tasks={eval_harness_tasks!r}): lm-eval-harness tasks "
                                 "are not supported; pass eval_harness_tasks=[]")
    for arg, value in (("override_output_path", override_output_path), ("trainer_mesh", trainer_mesh)):
        if value is not None:
            raise UnsupportedSetting(f"default_train({arg}={value!r}) is not supported")
    if not isinstance(train_config, SimpleTrainConfig):
        raise UnsupportedSetting(f"default_train(train_config=...) must be a SimpleTrainConfig, "
                                 f"got {type(train_config).__name__}")
    _refuse_unsupported(train_config)
    model = unwrap_versioned_value(model_config)
    data = _as_source(tokenized, "default_train(tokenized=...)")
    if isinstance(data, str):
        raise UnsupportedSetting("default_train(tokenized=...) must be a tokenize step, got a string")
    seq_len = unwrap_versioned_value(train_config.train_seq_len) or model.max_seq_len
    if seq_len > model.max_seq_len:
        raise UnsupportedSetting(f"SimpleTrainConfig.train_seq_len={seq_len} exceeds the model's max_seq_len "
                                 f"{model.max_seq_len}")
    options: dict[str, Any] = {}
    if train_config.steps_per_eval is not None:
        options["eval_every"] = unwrap_versioned_value(train_config.steps_per_eval)
    if train_config.max_eval_batches is not None:
        options["eval_batches"] = unwrap_versioned_value(train_config.max_eval_batches)
    if train_config.steps_per_export != 10000:
        from levanter.checkpoint import CheckpointConfig

        options["checkpoint"] = CheckpointConfig(save_every=unwrap_versioned_value(train_config.steps_per_export))
    # Marin's z-loss default is none; so is it here when the config says None.
    options["z_loss_weight"] = unwrap_versioned_value(train_config.z_loss_weight)
    if tags:
        options["tags"] = tuple(tags)
    if wandb_name is not None:
        options["run_id"] = wandb_name
    if wandb_group is not None:
        # Marin always logs to Weights & Biases; here it is opt-in, and naming a group opts in.
        from levanter.config import WandbConfig

        options["wandb"] = WandbConfig(group=wandb_group)
    return train_lm(name=os.path.join("checkpoints", name), version="v1", model=model,
                    optimizer=_optimizer(train_config), datasets={data: 1.0},
                    batch_size=unwrap_versioned_value(train_config.train_batch_size), seq_len=seq_len,
                    num_train_steps=unwrap_versioned_value(train_config.num_train_steps),
                    resources=train_config.resources, **options)
