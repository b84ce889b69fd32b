"""What names a trained model, for the steps that read one (evaluation, export, fine-tunes, sweeps).

Below :mod:`marin.experiment.training.train` and the evaluation modules alike: an eval step reads
a training step's checkpoints by these names without importing the training step's module, and
``train_lm(..., evals=...)`` builds its eval step from :mod:`marin.experiment.evaluation.eval`
without a cycle.
"""

from __future__ import annotations

from typing import Any, ClassVar

from levanter.config import TrainLmConfig
from marin.execution.core.identity import keep_identities
from marin.execution.core.lazy import StepHandle
from marin.execution.core.step import Step

__all__ = ["FINAL", "TrainedModelHandle", "check_checkpoint_kept", "final_only", "training_config"]

FINAL = "final"
"""Names a training step's final parameters where a checkpoint step could be given."""


class TrainedModelHandle(StepHandle):
    """Base of handles whose output holds a trained model laid out as a training step's (final
    parameters, tokenizer, ``train_summary.json``) without being one: a sweep's best trial, a merge
    of checkpoints, a preference-trained model. They are fine-tuned from (``checkpoint(handle)``)
    and evaluated at their final parameters, and at their checkpoints when they keep them
    (:attr:`keeps_checkpoints`: a training run of another objective, such as ``dpo(...)``)."""

    keeps_checkpoints: ClassVar[bool] = False
    """Whether its output holds the checkpoints its :meth:`training_config` describes."""

    def training_config(self) -> TrainLmConfig:
        """The training config as known before the step is built (what it picks may differ)."""
        raise NotImplementedError(f"{type(self).__name__} must say what it was trained as")


def final_only(model: Any, step: int | str | None) -> None:
    """Raise ValueError when ``step`` names a checkpoint of a model known only by its final parameters."""
    if isinstance(model, TrainedModelHandle) and not model.keeps_checkpoints and step not in (None, FINAL):
        raise ValueError(f"{model.name} holds only final parameters (which run it copies is decided when it "
                         f"is built), got checkpoint step {step!r}")


def training_config(model: Any) -> TrainLmConfig:
    """The config of a ``train_lm(...)`` handle or its step (or of a :class:`TrainedModelHandle`);
    raises ValueError for anything else."""
    if isinstance(model, TrainedModelHandle):
        return model.training_config()
    # A train_lm(...) handle (marin.experiment.training.train.TrainLm) or its step.
    if isinstance(model, StepHandle | Step) and isinstance(model.config, TrainLmConfig):
        return model.config
    raise ValueError(f"model must be a train_lm(...) handle or its step, got {type(model).__name__}: {model!r}")


def check_checkpoint_kept(config: TrainLmConfig, step: int) -> None:
    """Raise ValueError unless the run ``config`` describes writes checkpoint ``step`` and keeps it.

    A run saves every ``save_every`` steps and after its last; it keeps the newest ``keep_last`` of
    those and, for good, every multiple of ``keep_every``.
    """
    if not isinstance(step, int) or isinstance(step, bool) or step <= 0:
        raise ValueError(f"checkpoint step must be a positive int, got {step!r}")
    total, ckpt = config.trainer.num_train_steps, config.trainer.checkpoint
    if step > total:
        raise ValueError(f"checkpoint {step} is past the end of training ({total} steps)")
    if step % ckpt.save_every and step != total:
        raise ValueError(f"checkpoint {step} is never written: the run saves every {ckpt.save_every} steps "
                         f"and after its last ({total})")
    if step == total or (ckpt.keep_every is not None and step % ckpt.keep_every == 0):
        return
    saves = sorted(set(range(ckpt.save_every, total + 1, ckpt.save_every)) | {total})
    if step not in saves[-ckpt.keep_last:]:
        raise ValueError(f"checkpoint {step} is deleted by the run (it keeps the last {ckpt.keep_last}: "
                         f"{saves[-ckpt.keep_last:]}); keep it with checkpoint=CheckpointConfig(keep_every=...)")


# Defined in marin.experiment.train until it was split: those names stay in every hash (and for pickle).
keep_identities(globals(), "marin.experiment.train")
