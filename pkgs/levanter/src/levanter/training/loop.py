"""The training loop: step, read the step's metrics one step late, call the hooks that are due.

The host never waits for the device between steps unless something needs the state: a step's
metrics are fetched after the next step has been dispatched, and only a due hook (or SIGTERM)
makes the loop wait for the step it has just run, so that no hook ever sees a state whose loss
was not checked to be finite.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import jax
import numpy as np

from levanter.flops import utilisation
from levanter.training.errors import NonFiniteLossError, TrainingPreempted
from levanter.training.hooks import Hook, Hooks, MetricsListener, ScheduledHook, StepInfo
from levanter.training.state import TrainState

__all__ = ["MetricsSink", "Throughput", "Trainer"]


class MetricsSink(Protocol):
    """Where a run's metrics go (``levanter.metrics.MetricsWriter``)."""

    def write(self, step: int, values: dict[str, Any]) -> None: ...


@dataclasses.dataclass(frozen=True)
class Throughput:
    """What one step is worth, to turn a step time into tokens/s and MFU."""

    tokens_per_step: int
    """Tokens trained on per step (batch x context)."""
    model_flops_per_step: float
    """Model FLOPs of one step (``flops_per_token * tokens_per_step``)."""
    num_devices: int
    """Devices the step runs on."""
    peak_flops_per_device: float
    """Peak FLOP/s of one device."""
    causal_flops_per_step: float | None = None
    """Model FLOPs of one step with the attention products halved for the causal mask (MaxText's count)."""

    def rates(self, step_time: float) -> dict[str, float]:
        """``tokens_per_s``, ``mfu`` (and ``mfu_causal``) of a step that took ``step_time`` seconds."""
        out = {"tokens_per_s": self.tokens_per_step / step_time,
               "mfu": utilisation(self.model_flops_per_step, step_time, self.num_devices, self.peak_flops_per_device)}
        if self.causal_flops_per_step is not None:
            out["mfu_causal"] = utilisation(self.causal_flops_per_step, step_time, self.num_devices,
                                            self.peak_flops_per_device)
        return out


class _SigtermFlag:
    """Turns SIGTERM into a flag the loop polls between steps (only the main thread can install it)."""

    def __init__(self, install: bool) -> None:
        self.set = False
        self._install = install
        self._previous: Any = None

    def __enter__(self) -> _SigtermFlag:
        if self._install and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.set = True

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


class Trainer:
    """Runs a compiled train step from a state to ``num_train_steps``, calling hooks on the way.

    Each step's metrics (the step's own, plus ``step_time``, ``tokens_per_s``, ``mfu``,
    ``input_wait_frac``, and ``time_to_first_step_s`` on the first) are written to ``writer`` on
    every ``log_every``-th step, the first and the last; listeners see every step's.

    Args:
        train_step: ``(state, batch) -> (state, metrics)``, jitted (it may donate the state); with
            ``rate_of_step``, ``(state, batch, rate)``.
        batches: host batches, one per step.
        place: a host batch -> the batch array the step takes.
        num_train_steps: the step the run ends after.
        writer: where metrics go.
        throughput: turns step times into rates.
        log_every: write every this many steps' metrics.
        started_at: ``time.perf_counter()`` when the run started (for ``time_to_first_step_s``).
        rate_of_step: the learning rate of each (0-based) step, handed to ``train_step``.
    """

    def __init__(self, train_step: Callable[..., tuple[TrainState, Any]], batches: Iterator[np.ndarray],
                 place: Callable[[np.ndarray], Any], *, num_train_steps: int, writer: MetricsSink,
                 throughput: Throughput, log_every: int = 1, started_at: float | None = None,
                 rate_of_step: Callable[[int], Any] | None = None):
        self._step = train_step
        self._rate_of_step = rate_of_step
        self._batches = batches
        self._place = place
        self.num_train_steps = num_train_steps
        self._writer = writer
        self._throughput = throughput
        self._log_every = log_every
        self._started_at = time.perf_counter() if started_at is None else started_at
        self._hooks = Hooks()
        self._listeners: list[MetricsListener] = []
        self._on_preempt: Callable[[StepInfo], str] | None = None
        self._pending: collections.deque[tuple[int, Any, float]] = collections.deque()
        self._first_step = 0
        self._last_time = 0.0
        self.last_metrics: dict[str, float] = {}
        """The numbers of the latest step whose metrics were read (empty before the first)."""
        self.step = 0
        """Completed steps: where :meth:`run` started, then after each step."""
        self.steps_run = 0
        """Steps run by :meth:`run` (not counting those before ``start_step``)."""
        self.train_seconds = 0.0
        """Seconds from the start of :meth:`run`'s loop to reading its last step's metrics."""

    def add_hook(self, fn: Hook, *, every: int | None = 1, at_end: bool = True) -> None:
        """Call ``fn(StepInfo)`` after every ``every``-th step (None: none) and, with ``at_end``, after the
        last; what it returns is written as metrics at that step. See :meth:`Hooks.add`."""
        self._hooks.add(fn, every=every, at_end=at_end)

    def add_scheduled(self, hook: ScheduledHook) -> None:
        """Add ``hook.fn`` as :meth:`add_hook` would, with the schedule ``hook`` names."""
        self._hooks.add(hook.fn, every=hook.every, at_end=hook.at_end)

    def add_listener(self, fn: MetricsListener) -> None:
        """Call ``fn(step, metrics)`` with every step's numbers, one step late (no state, no waiting)."""
        self._listeners.append(fn)

    def on_preempt(self, fn: Callable[[StepInfo], str]) -> None:
        """On SIGTERM, after the step in flight, call ``fn`` (it saves what a resume needs and returns
        where) and raise :class:`TrainingPreempted`. Without it SIGTERM is left to its usual handler."""
        self._on_preempt = fn

    def run(self, state: TrainState, start_step: int) -> TrainState:
        """Train from ``state`` (after ``start_step`` steps) to ``num_train_steps``; return the final state.

        Raises:
            TrainingPreempted: SIGTERM arrived and the preemption handler ran.
            NonFiniteLossError: a step's loss was NaN or infinite.
        """
        step = self.step = start_step
        self._first_step = start_step + 1
        with _SigtermFlag(self._on_preempt is not None) as sigterm:
            loop_start = self._last_time = time.perf_counter()
            while step < self.num_train_steps:
                t0 = time.perf_counter()
                batch = next(self._batches)
                wait_s = time.perf_counter() - t0
                if self._rate_of_step is None:
                    state, metrics = self._step(state, self._place(batch))
                else:
                    state, metrics = self._step(state, self._place(batch), self._rate_of_step(step))
                step = self.step = step + 1
                self.steps_run += 1
                self._pending.append((step, metrics, wait_s))
                self._drain(keep=1)
                due = self._hooks.due(step, self.num_train_steps)
                if due or sigterm.set:
                    self._drain(keep=0)  # never hand a hook (a checkpoint) a state whose loss was not checked
                    info = StepInfo(step=step, state=state, metrics=self.last_metrics,
                                    last=step == self.num_train_steps)
                    for fn in due:
                        extra = fn(info)
                        if extra:
                            self._writer.write(step, dict(extra))
                    if sigterm.set and self._on_preempt is not None:
                        raise TrainingPreempted(step, self._on_preempt(info))
            self._drain(keep=0)
            self.train_seconds = self._last_time - loop_start
        return state

    def _drain(self, keep: int) -> None:
        """Read the metrics of all but the ``keep`` newest steps run (waiting for the device if need be)."""
        while len(self._pending) > keep:
            step_no, metrics, wait_s = self._pending.popleft()
            values = {k: float(v) for k, v in jax.device_get(metrics).items()}
            now = time.perf_counter()
            if not math.isfinite(values["loss"]):
                raise NonFiniteLossError(step_no, values["loss"])
            step_time = now - self._last_time
            self._last_time = now
            values["step_time"] = step_time
            values.update(self._throughput.rates(step_time))
            values["input_wait_frac"] = min(wait_s / step_time, 1.0)
            if step_no == self._first_step:
                # Start-up cost (init or restore, compilation, first batch): what a resume pays.
                values["time_to_first_step_s"] = now - self._started_at
            if step_no % self._log_every == 0 or step_no == self.num_train_steps or step_no == self._first_step:
                self._writer.write(step_no, values)
            self.last_metrics = values
            for fn in self._listeners:
                fn(step_no, values)
