"""``train_lm()``: a lazy handle to a training step on levanter (JAX, Haiku, Optax, Grain, Orbax)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from levanter.checkpoint import CheckpointConfig
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig
from marin.execution.lazy import Lazy
from marin.execution.step import Step, unhashed_field

__all__ = ["TrainLm", "TrainLmConfig", "WeightedDataset", "train_lm", "train_lm_step", "unigram_entropy"]


@dataclass(frozen=True)
class WeightedDataset:
    """One tokenized dataset of the mixture and its sampling weight."""

    data: Any
    """A tokenize step or handle (or the path of a tokenized folder)."""
    weight: float = 1.0
    """Relative weight in the mixture."""


@dataclass(frozen=True)
class TrainLmConfig:
    """Everything a training step needs; its hashed fields define the trained model."""

    model: LlamaConfig
    """Model shape (its vocabulary size is taken from the data)."""
    optimizer: AdamConfig
    """AdamW with its schedule."""
    datasets: tuple[WeightedDataset, ...]
    """The training mixture."""
    batch_size: int
    """Sequences per step (global, over all devices)."""
    seq_len: int
    """Tokens per sequence."""
    num_train_steps: int
    """Optimizer steps."""
    seed: int = 0
    """Seed of initialisation and data order."""
    grad_accum: int = 1
    """Micro-batches accumulated per step."""
    compute_dtype: str = "float32"
    """float32 or bfloat16 compute."""
    eval_every: int = 50
    """Validation loss every this many steps (0: only at the end)."""
    eval_batches: int = 4
    """Validation batches per evaluation."""
    checkpoint: CheckpointConfig = CheckpointConfig(save_every=100)
    """When checkpoints are written and kept (resuming relies on them)."""
    log_every: int = unhashed_field(default=1)
    """Metrics logging frequency (does not change the result)."""

    def __post_init__(self) -> None:
        for name in ("batch_size", "seq_len", "num_train_steps", "grad_accum"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not self.datasets:
            raise ValueError("datasets must name at least one tokenized dataset")
        if self.compute_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"compute_dtype must be 'float32' or 'bfloat16', got {self.compute_dtype!r}")


def train_lm_step(config: TrainLmConfig, output_path: str) -> None:
    """Step function: train (resuming from the newest checkpoint in ``output_path``)."""
    from levanter.data.spec import DatasetSpec
    from levanter.trainer import ComputeDtype, TrainerConfig, main
    from rigging import filesystem as fs

    datasets = tuple(DatasetSpec(path=str(d.data), weight=d.weight) for d in config.datasets)
    # Keep the tokenizer beside the model so `marin sample` can decode with the same vocabulary.
    first = fs.join(datasets[0].path, "tokenizer.json")
    if fs.exists(first):
        fs.atomic_write(fs.join(output_path, "tokenizer.json"), fs.read_bytes(first))
    trainer_config = TrainerConfig(
        model=config.model, optimizer=config.optimizer, datasets=datasets, output_path=output_path,
        batch_size=config.batch_size, seq_len=config.seq_len, num_train_steps=config.num_train_steps,
        seed=config.seed, grad_accum=config.grad_accum, compute_dtype=ComputeDtype(config.compute_dtype),
        eval_every=config.eval_every, eval_batches=config.eval_batches, checkpoint=config.checkpoint,
        log_every=config.log_every,
    )
    result = main(trainer_config)
    summary = {k: v for k, v in result.items() if isinstance(v, int | float | str | type(None))}
    fs.atomic_write(fs.join(output_path, "train_summary.json"), json.dumps(summary, indent=2, default=str))
    print(f"trained {result.get('steps')} steps: loss {result.get('final_loss')}, validation loss {result.get('val_loss')}")


@dataclass(frozen=True, eq=False)
class TrainLm(Lazy):
    """Handle to a training step; its output holds checkpoints, final parameters, metrics, config."""

    name: str
    version: str
    config: TrainLmConfig
    resources: Any = None

    def _build(self) -> Step:
        return Step(name=self.name, fn=train_lm_step, config=self.config, version=self.version,
                    resources=self.resources)


def train_lm(name: str, version: str, model: LlamaConfig, optimizer: AdamConfig,
             datasets: Mapping[Any, float], batch_size: int, seq_len: int, num_train_steps: int, *,
             seed: int = 0, grad_accum: int = 1, compute_dtype: str = "float32", eval_every: int = 50,
             eval_batches: int = 4, checkpoint: CheckpointConfig | None = None, log_every: int = 1,
             resources: Any = None) -> TrainLm:
    """A language-model training step over a weighted mixture of tokenized datasets.

    Args:
        name: the step's name (its output folder is ``<prefix>/<name>-<hash>``).
        version: bump to retrain when the training code changed in a way the config does not show.
        model: the Llama shape (vocabulary size comes from the data).
        optimizer: ``AdamConfig``.
        datasets: ``{tokenized handle: weight}``.
        batch_size, seq_len, num_train_steps: the usual.
        resources: an ``iris`` ResourceConfig saying where the step runs (never hashed).
    """
    if not isinstance(datasets, Mapping) or not datasets:
        raise ValueError("datasets must be a non-empty mapping of tokenized data to weights")
    mixture = []
    for data, weight in datasets.items():
        if not isinstance(weight, int | float) or not weight > 0:
            raise ValueError(f"dataset weight must be a number > 0, got {weight!r}")
        mixture.append(WeightedDataset(data=data, weight=float(weight)))
    config = TrainLmConfig(
        model=model, optimizer=optimizer, datasets=tuple(mixture), batch_size=batch_size, seq_len=seq_len,
        num_train_steps=num_train_steps, seed=seed, grad_accum=grad_accum, compute_dtype=compute_dtype,
        eval_every=eval_every, eval_batches=eval_batches,
        checkpoint=checkpoint if checkpoint is not None else CheckpointConfig(save_every=100), log_every=log_every)
    return TrainLm(name=name, version=version, config=config, resources=resources)


def unigram_entropy(tokenized_path: str, split: str = "validation") -> float:
    """Entropy (nats per token) of the unigram distribution of a split, end-of-document tokens included.

    The baseline a language model must beat: a model that ignores context can do no better.
    """
    import numpy as np

    from levanter.data.tokenized import open_split, read_index

    index = read_index(tokenized_path)
    data = open_split(tokenized_path, split)
    counts = np.zeros(int(index["vocab_size"]), dtype=np.int64)
    for i in range(len(data.source)):
        tokens = np.frombuffer(data.source[i], dtype="<u4")
        np.add.at(counts, tokens, 1)
    counts[int(index["eos_id"])] += len(data.source)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())
