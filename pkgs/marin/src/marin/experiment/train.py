"""``train_lm()``: a lazy handle to a training step on levanter (JAX, Haiku, Optax, Grain, Orbax).

The step's config *is* levanter's :class:`~levanter.config.TrainLmConfig`: the datasets in it are
tokenize steps (or handles) until the runner resolves them to their output folders, and the
output folder is given to ``levanter.trainer.main`` at run time, never hashed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from levanter.config import TrainLmConfig
from levanter.data.spec import DatasetSpec
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig
from marin.execution.lazy import Lazy
from marin.execution.step import InvalidStep, Step

__all__ = ["TrainLm", "TrainLmConfig", "train_lm", "train_lm_step", "trained_model", "unigram_entropy"]


def train_lm_step(config: TrainLmConfig, output_path: str) -> None:
    """Step function: train (resuming from the newest checkpoint in ``output_path``)."""
    from levanter.trainer import main
    from rigging import filesystem as fs

    # Keep the tokenizer beside the model so `marin sample` can decode with the same vocabulary.
    # (and the chat template, for chat data, so `marin sample --chat` renders turns the same way).
    for name in ("tokenizer.json", "chat_template.json"):
        first = fs.join(str(config.data.datasets[0].path), name)
        if fs.exists(first):
            fs.atomic_write(fs.join(output_path, name), fs.read_bytes(first))
    result = main(config, output_path)
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
             evals: Any = None, resources: Any = None, **settings: Any) -> TrainLm:
    """A language-model training step over a weighted mixture of tokenized datasets.

    Every setting is checked here, so a bad value fails now, naming its field, not after the
    step was planned and started.

    Args:
        name: the step's name (its output folder is ``<prefix>/<name>-<hash>``).
        version: bump to retrain when the training code changed in a way the config does not show.
        model: the Llama shape (vocabulary size comes from the data).
        optimizer: ``AdamConfig``.
        datasets: ``{tokenized handle: weight}``.
        batch_size, seq_len, num_train_steps: the usual.
        evals: evaluations to run during training; not supported yet (None or empty).
        resources: an ``iris`` ResourceConfig saying where the step runs (never hashed).
        **settings: any other field of levanter's ``TrainerConfig`` (``seed``, ``grad_accum``,
            ``compute_dtype``, ``eval_every``, ``eval_batches``, ``checkpoint``, ``log_every``,
            ``peak_flops_per_device``, ``run_id``, ``tags``, ``wandb``, ``initialize_from``: e.g.
            ``hf_checkpoint("org/name")`` from ``marin.experiment.hf``), of its ``DataConfig``
            (``vocab_from_data``, ``prefetch``, ``shard_cache_dir``), or ``z_loss_weight``.
            ``run_id``, ``tags``, ``wandb``, ``log_every``, ``prefetch``, ``shard_cache_dir`` and
            ``peak_flops_per_device`` do not change the step's hash.

    Raises:
        InvalidStep: a bad setting, naming the step and the field.
    """
    if evals:
        # The hook for evaluation during training (issue 12): until then, say so rather than ignore it.
        raise InvalidStep(f"train_lm {name!r}: evals is not supported yet; pass evals=None and evaluate "
                          "the trained model in a step of its own")
    if not isinstance(datasets, Mapping) or not datasets:
        raise InvalidStep(f"train_lm {name!r}: datasets must be a non-empty mapping of tokenized data to weights")
    try:
        mixture = []
        for data, weight in datasets.items():
            if not isinstance(weight, int | float) or isinstance(weight, bool) or not weight > 0:
                raise ValueError(f"dataset weight must be a number > 0, got {weight!r}")
            mixture.append(DatasetSpec(path=data, weight=float(weight)))
        config = TrainLmConfig.from_settings(tuple(mixture), model, optimizer, batch_size=batch_size,
                                             seq_len=seq_len, num_train_steps=num_train_steps, **settings)
    except (ValueError, TypeError) as e:
        raise InvalidStep(f"train_lm {name!r}: {e}") from None
    return TrainLm(name=name, version=version, config=config, resources=resources)


def unigram_entropy(tokenized_path: str, split: str = "validation") -> float:
    """Entropy (nats per token) of the unigram distribution of a split, end-of-document tokens included.

    The baseline a language model must beat: a model that ignores context can do no better.
    """
    import numpy as np

    from levanter.data.tokenized import open_split, read_index
    from zephyr.shards import decode_tokens

    index = read_index(tokenized_path)
    data = open_split(tokenized_path, split)
    counts = np.zeros(int(index["vocab_size"]), dtype=np.int64)
    for i in range(len(data.source)):
        np.add.at(counts, decode_tokens(data.source[i]), 1)
    counts[int(index["eos_id"])] += len(data.source)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def trained_model(model: Any) -> Any:
    """Name another training step's final parameters for ``train_lm(..., initialize_from=...)``:
    a fine-tune starts there with a fresh optimizer, its vocabulary grown to its data's (new
    special tokens get new rows; the old rows stay as trained). The step's key holds ``model``'s hash.
    """
    from levanter.initialize import TrainedModel

    return TrainedModel(path=model)
