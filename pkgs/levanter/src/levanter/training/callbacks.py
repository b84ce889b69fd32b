"""The trainer's own hooks and listeners: checkpoints (and the save on preemption), validation loss, progress."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from levanter.checkpoint import Checkpointer
from levanter.training.hooks import ScheduledHook, StepInfo

__all__ = ["Checkpointing", "Progress", "Validation"]


class Checkpointing:
    """A hook that saves a checkpoint (the state and the data position) when it is called.

    Add :meth:`scheduled` to the loop (every ``save_every`` steps and after the last); give
    :meth:`preempt` to ``Trainer.on_preempt``.

    Args:
        checkpointer: where checkpoints go.
        data_state: the input iterator's position after the step just run.
        on_saved: called after each save is started (the metrics writer's ``sync``: the rows up to a
            checkpoint reach a remote output with it).
    """

    def __init__(self, checkpointer: Checkpointer, data_state: Callable[[], dict],
                 on_saved: Callable[[], None] = lambda: None):
        self._checkpointer = checkpointer
        self._data_state = data_state
        self._on_saved = on_saved
        self._saved_step: int | None = None

    def scheduled(self) -> ScheduledHook:
        """This hook, due every ``CheckpointConfig.save_every`` steps and after the last step."""
        return ScheduledHook(self, every=self._checkpointer.config.save_every, at_end=True)

    def __call__(self, info: StepInfo) -> None:
        self._save(info, wait=False)

    def _save(self, info: StepInfo, wait: bool) -> None:
        self._checkpointer.save(info.step, info.state, self._data_state(), wait=wait)
        self._saved_step = info.step
        self._on_saved()

    def preempt(self, info: StepInfo) -> str:
        """Commit a checkpoint of ``info.step`` before returning (saving it unless a save of that step is
        under way); return the checkpoint folder."""
        if self._saved_step == info.step:
            self._checkpointer.wait()
        else:
            self._save(info, wait=True)
        return self._checkpointer.directory


class Validation:
    """A hook returning ``{"val_loss": mean loss over the validation batches}`` of the state's parameters.

    Args:
        eval_loss: ``(params, batch array) -> scalar loss``, jitted.
        batches: this process's rows of each validation batch (host arrays).
        place: a host batch -> the batch array ``eval_loss`` takes.
    """

    def __init__(self, eval_loss: Callable[[Any, Any], Any], batches: Sequence[np.ndarray],
                 place: Callable[[np.ndarray], Any]):
        self._eval_loss = eval_loss
        self._batches = list(batches)
        self._place = place
        self.last: float | None = None
        """The latest validation loss (None before the first, and without batches)."""

    def evaluate(self, params: Any) -> float | None:
        """Mean loss of ``params`` over the validation batches (None without batches)."""
        if not self._batches:
            return None
        losses = [self._eval_loss(params, self._place(b)) for b in self._batches]
        self.last = float(np.mean(jax.device_get(losses)))
        return self.last

    def __call__(self, info: StepInfo) -> Mapping[str, float] | None:
        loss = self.evaluate(info.state.params)
        return None if loss is None else {"val_loss": loss}


class Progress:
    """A metrics listener reporting how far the run has got: beside its output for whoever watches it
    (``rigging.progress``), and as a terminal progress bar when there is one."""

    def __init__(self, reported: Any, bar: Any = None):
        self._reported = reported
        self._bar = bar
        self._tokens_per_s = float("nan")

    def __call__(self, step: int, values: Mapping[str, float]) -> None:
        self._tokens_per_s = values.get("tokens_per_s", self._tokens_per_s)
        self._reported.update(step, loss=values["loss"], tokens_per_s=self._tokens_per_s)
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(loss=f"{values['loss']:.3f}")

    def close(self) -> None:
        """Close the progress bar."""
        if self._bar is not None:
            self._bar.close()
