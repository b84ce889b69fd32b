"""What the training loop calls besides the step: hooks (with the state, at the steps they are due)
and metrics listeners (every step's numbers, one step late).

A hook is any callable ``fn(info: StepInfo) -> Mapping[str, float] | None``. What it returns is
written to the run's metrics (``metrics.jsonl``, TensorBoard, W&B) at ``info.step``, so a
benchmark evaluation run every N steps is::

    def harness_scores(info: StepInfo) -> dict[str, float]:
        return {"eval/hellaswag_acc": score(info.state.params)}

    trainer.add_hook(harness_scores, every=500)

or, through ``levanter.trainer.main``, ``main(config, output_path, hooks=[ScheduledHook(harness_scores, every=500)])``.

In a multi-process run every process calls every hook at the same steps (the state is split over
processes, so computing on it is a collective); process 0 alone writes what they return.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Hook", "Hooks", "MetricsListener", "ScheduledHook", "StepInfo"]


@dataclasses.dataclass(frozen=True)
class StepInfo:
    """Where training stands after a step, as a hook sees it."""

    step: int
    """Completed optimizer steps (1 after the first)."""
    state: Any
    """The :class:`~levanter.training.state.TrainState` after ``step``, on the devices. Valid only during
    the call: the next step reuses (donates) its buffers, so copy what must outlive it."""
    metrics: Mapping[str, float]
    """This step's numbers on the host: ``loss``, ``grad_norm``, ``lr`` (``z_loss``), ``step_time``,
    ``tokens_per_s``, ``mfu``, ``input_wait_frac``."""
    last: bool
    """Whether ``step`` is the run's final step (``num_train_steps``)."""


Hook = Callable[[StepInfo], Mapping[str, Any] | None]
"""Called at the steps it is due with the state; what it returns is logged at that step."""

MetricsListener = Callable[[int, Mapping[str, float]], None]
"""Called with every step's numbers (``StepInfo.metrics``), one step late and without the state, so
the host never waits for the device on its account: progress displays and the like."""


@dataclasses.dataclass(frozen=True)
class ScheduledHook:
    """A hook and when it runs (see :meth:`Hooks.add`)."""

    fn: Hook
    """The hook."""
    every: int | None = 1
    """Run after every step that is a multiple of this (None: only at the end)."""
    at_end: bool = True
    """Also run after the last step."""

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise ValueError(f"a hook must be callable, got {type(self.fn).__name__}")
        every = self.every
        if every is not None and (not isinstance(every, int) or isinstance(every, bool) or every <= 0):
            raise ValueError(f"every must be a positive int or None, got {every!r}")
        if every is None and not self.at_end:
            raise ValueError(f"hook {getattr(self.fn, '__name__', self.fn)!r} would never run: "
                             "every=None and at_end=False")

    def due(self, step: int, last_step: int) -> bool:
        return (self.every is not None and step % self.every == 0) or (self.at_end and step == last_step)


class Hooks:
    """Hooks in the order they were added, each with when it is due."""

    def __init__(self) -> None:
        self._hooks: list[ScheduledHook] = []

    def add(self, fn: Hook, *, every: int | None = 1, at_end: bool = True) -> None:
        """Call ``fn`` after every step that is a multiple of ``every`` (None: none) and, with ``at_end``,
        after the last step; once per step either way, in the order hooks were added.

        Raises:
            ValueError: ``fn`` is not callable, ``every`` is not a positive int or None, or the hook
                would never run.
        """
        self._hooks.append(ScheduledHook(fn, every, at_end))

    def due(self, step: int, last_step: int) -> list[Hook]:
        """The hooks to call after ``step`` of a run ending at ``last_step``."""
        return [h.fn for h in self._hooks if h.due(step, last_step)]

    def __len__(self) -> int:
        return len(self._hooks)
