"""Marin's ``SimpleTrainConfig``: the training settings ``experiments.defaults.default_train`` reads.

Every field of Marin's class exists, so Marin's files construct it unchanged; ``default_train``
uses the ones this project supports (listed in :data:`SUPPORTED`) and refuses, by name, any other
field set away from its default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["SUPPORTED", "SimpleTrainConfig"]


@dataclass(frozen=True)
class SimpleTrainConfig:
    """Training settings as Marin's files write them."""

    resources: Any
    """A ``ResourceConfig`` (``ResourceConfig.with_cpu()``, ``.with_tpu("v5litepod-16")`` ...)."""
    train_batch_size: int
    """Sequences per step."""
    num_train_steps: int
    """Optimizer steps."""
    learning_rate: float
    """Peak learning rate."""
    data_seed: int | None = None
    weight_decay: float | None = None
    beta1: float | None = None
    beta2: float | None = None
    epsilon: float | None = None
    max_grad_norm: float | None = None
    warmup: float | None = None
    decay: float | None = None
    rewarmup: float | None = None
    lr_schedule: str | None = None
    min_lr_ratio: float | None = None
    cycle_length: int | list[int] | None = None
    z_loss_weight: float | None = None
    ema_beta: float | None = None
    skip_bad_steps: bool = False
    steps_per_eval: int | None = None
    steps_per_export: int = 10000
    steps_per_task_eval: int | None = None
    steps_per_hf_export: int | None = None
    per_device_parallelism: int = -1
    per_device_eval_parallelism: int | None = None
    max_eval_batches: int | None = None
    train_seq_len: int | None = None
    initialize_from_checkpoint_path: str | None = None
    initialize_from_hf: str | None = None
    reset_data_loader_on_init: bool = True
    allow_partial_checkpoint: bool = False
    int8: bool = False
    optimizer_config: Any = None
    watch: Any = None
    profiler: Any = None
    explicit_mesh_axes: Any = None
    pad_tokenizer_to_match_model: bool = False
    env_vars: dict[str, str] | None = None


SUPPORTED = frozenset({
    "resources", "train_batch_size", "num_train_steps", "learning_rate", "weight_decay", "beta1", "beta2",
    "epsilon", "max_grad_norm", "warmup", "decay", "lr_schedule", "min_lr_ratio", "z_loss_weight", "steps_per_eval",
    "steps_per_export", "max_eval_batches", "train_seq_len", "optimizer_config",
})
"""Fields ``default_train`` uses; any other field must stay at its default."""
