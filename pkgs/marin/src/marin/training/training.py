"""What a training step's output holds, under the name Marin's files use (``ArtifactStep[LevanterCheckpoint]``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LevanterCheckpoint"]


@dataclass(frozen=True)
class LevanterCheckpoint:
    """A trained model: a folder with Orbax checkpoints, the final parameters, metrics and the
    config, as :func:`marin.experiment.training.train.train_lm` writes it."""

    path: str
    """The step's output folder."""
