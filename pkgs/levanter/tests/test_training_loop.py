"""The training loop and its hooks: when hooks run and what they see, listeners, logging, divergence, SIGTERM."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from levanter.training import (
    NonFiniteLossError,
    ScheduledHook,
    StepInfo,
    Throughput,
    Trainer,
    TrainingPreempted,
    TrainState,
)

STEPS = 10


class _Rows:
    """A metrics sink keeping what was written."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, dict]] = []

    def write(self, step: int, values: dict) -> None:
        self.rows.append((step, dict(values)))


@jax.jit
def _step(state: TrainState, batch: jax.Array) -> tuple[TrainState, dict]:
    """Adds the batch's sum to a running total; the "loss" is that sum."""
    total = state.params["acc"]["total"] + jnp.sum(batch)
    return state.replace(step=state.step + 1, params={"acc": {"total": total}}), {"loss": jnp.sum(batch)}


def _state() -> TrainState:
    return TrainState(step=jnp.zeros((), jnp.int32), params={"acc": {"total": jnp.zeros(())}}, opt_state=(),
                      key=jax.random.PRNGKey(0))


def _batches(bad_at: int | None = None, sigterm_at: int | None = None) -> Iterator[np.ndarray]:
    """Batch ``i`` (1-based) sums to ``i``; NaN at ``bad_at``; SIGTERM sent while fetching ``sigterm_at``."""
    i = 0
    while True:
        i += 1
        if i == sigterm_at:
            os.kill(os.getpid(), signal.SIGTERM)
        yield np.full((2,), np.nan if i == bad_at else i / 2, np.float32)


def _trainer(rows: _Rows, batches: Iterator[np.ndarray] | None = None, log_every: int = 1) -> Trainer:
    return Trainer(_step, batches or _batches(), jnp.asarray, num_train_steps=STEPS, writer=rows,
                   throughput=Throughput(tokens_per_step=4, model_flops_per_step=100.0, num_devices=1,
                                         peak_flops_per_device=1e9), log_every=log_every)


def test_hooks_run_at_their_steps_and_at_the_end_with_that_steps_state_and_metrics():
    rows = _Rows()
    trainer = _trainer(rows)
    seen: dict[str, list[tuple[int, float, float, bool]]] = {"every3": [], "not_at_end": [], "end_only": []}

    def record(name: str):
        def hook(info: StepInfo) -> None:
            assert int(info.state.step) == info.step  # the state after this very step
            seen[name].append((info.step, float(info.state.params["acc"]["total"]), info.metrics["loss"], info.last))
        return hook

    trainer.add_hook(record("every3"), every=3)
    trainer.add_hook(record("not_at_end"), every=3, at_end=False)
    trainer.add_hook(record("end_only"), every=None)
    final = trainer.run(_state(), start_step=0)
    # After step s the total is 1 + ... + s = s(s+1)/2 and the step's loss is s.
    assert seen["every3"] == [(s, s * (s + 1) / 2, float(s), s == STEPS) for s in (3, 6, 9, 10)]
    assert [s for s, *_ in seen["not_at_end"]] == [3, 6, 9]
    assert seen["end_only"] == [(10, 55.0, 10.0, True)]
    assert int(final.step) == STEPS and (trainer.step, trainer.steps_run) == (STEPS, STEPS)
    assert trainer.last_metrics["loss"] == 10.0 and trainer.train_seconds > 0


def test_what_a_hook_returns_is_logged_at_its_step():
    rows = _Rows()
    trainer = _trainer(rows, log_every=4)
    trainer.add_hook(lambda info: {"bench/acc": info.step * 10.0}, every=5)
    trainer.add_hook(lambda info: None, every=2)  # returns nothing: nothing logged
    trainer.run(_state(), start_step=0)
    assert [(s, v) for s, v in rows.rows if "bench/acc" in v] == [(5, {"bench/acc": 50.0}), (10, {"bench/acc": 100.0})]
    # Step rows: the first, every log_every-th, the last.
    step_rows = [(s, v) for s, v in rows.rows if "loss" in v]
    assert [s for s, _ in step_rows] == [1, 4, 8, 10]
    assert {"step_time", "tokens_per_s", "mfu", "input_wait_frac", "time_to_first_step_s"} <= set(step_rows[0][1])
    assert "time_to_first_step_s" not in step_rows[1][1]
    assert all(v["loss"] == s for s, v in step_rows)


def test_listeners_see_every_step_in_order_and_a_resume_starts_after_its_step():
    rows = _Rows()
    trainer = _trainer(rows)
    heard: list[tuple[int, float]] = []
    hooked: list[int] = []
    trainer.add_listener(lambda step, values: heard.append((step, values["loss"])))
    trainer.add_hook(lambda info: hooked.append(info.step), every=3)
    trainer.run(_state(), start_step=7)
    assert heard == [(8, 1.0), (9, 2.0), (10, 3.0)]  # the batches start again from the first
    assert hooked == [9, 10]
    assert trainer.steps_run == 3


def test_a_resume_of_a_finished_run_runs_no_step_and_no_hook():
    trainer = _trainer(_Rows())
    trainer.add_hook(lambda info: pytest.fail("no step ran"), every=1)
    state = _state()
    assert trainer.run(state, start_step=STEPS) is state
    assert (trainer.steps_run, trainer.last_metrics) == (0, {})


def test_a_non_finite_loss_stops_before_any_later_hook():
    rows = _Rows()
    trainer = _trainer(rows, batches=_batches(bad_at=4))
    hooked: list[int] = []
    trainer.add_hook(lambda info: hooked.append(info.step), every=2)
    with pytest.raises(NonFiniteLossError) as err:
        trainer.run(_state(), start_step=0)
    assert err.value.step == 4 and "at step 4" in str(err.value)
    assert hooked == [2]


def test_sigterm_calls_the_preemption_handler_after_the_step_in_flight():
    previous = signal.getsignal(signal.SIGTERM)
    rows = _Rows()
    trainer = _trainer(rows, batches=_batches(sigterm_at=4))
    saved: list[tuple[int, float]] = []

    def preempt(info: StepInfo) -> str:
        saved.append((info.step, info.metrics["loss"]))
        return "/ckpt"

    trainer.on_preempt(preempt)
    with pytest.raises(TrainingPreempted) as err:
        trainer.run(_state(), start_step=0)
    assert saved == [(4, 4.0)]
    assert (err.value.step, err.value.checkpoint_path) == (4, "/ckpt")
    assert signal.getsignal(signal.SIGTERM) is previous  # the usual handler is back


@pytest.mark.parametrize("kwargs, message", [
    ({"every": 0}, "every must be a positive int or None, got 0"),
    ({"every": 2.5}, "every must be a positive int or None, got 2.5"),
    ({"every": None, "at_end": False}, "would never run: every=None and at_end=False"),
])
def test_a_bad_schedule_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _trainer(_Rows()).add_hook(lambda info: None, **kwargs)
    with pytest.raises(ValueError, match=message):
        ScheduledHook(lambda info: None, **kwargs)


def test_a_hook_must_be_callable():
    with pytest.raises(ValueError, match="a hook must be callable, got str"):
        ScheduledHook("log")  # type: ignore[arg-type]


def test_preemption_commits_the_checkpoint_of_its_step_once(tmp_path):
    from levanter.checkpoint import CheckpointConfig, Checkpointer, committed_steps
    from levanter.training import Checkpointing

    directory = str(tmp_path / "ckpt")
    checkpointer = Checkpointer(directory, CheckpointConfig(save_every=2, keep_last=5))
    synced: list[int] = []
    checkpointing = Checkpointing(checkpointer, lambda: {"position": len(synced)}, on_saved=lambda: synced.append(1))
    try:
        assert checkpointing.scheduled().every == 2 and checkpointing.scheduled().at_end
        state = _state()
        info = StepInfo(step=2, state=state, metrics={"loss": 1.0}, last=False)
        checkpointing(info)  # the step's save, in the background
        # SIGTERM after the same step: that save is waited for, not written again.
        assert checkpointing.preempt(info) == directory
        assert committed_steps(directory) == [2] and len(synced) == 1
        # After a step with no save due, preemption saves it, committed before it returns.
        assert checkpointing.preempt(StepInfo(step=3, state=state, metrics={"loss": 1.0}, last=False)) == directory
        assert committed_steps(directory) == [2, 3] and len(synced) == 2
    finally:
        checkpointer.close()
