"""A warm process runs calls one after another, itself, each as if alone; what a call leaves that
cannot be put back, its failure, its death or a long idle time ends the process."""

from __future__ import annotations

import functools
import logging
import os
import random
import signal
import time

import pytest

from fray.types import JobCancelled, JobFailed
from fray.warm_process import WarmConfig, WarmProcess


def _changes_everything(label: str) -> dict:
    """Print and log a line, and change what a fresh process would not carry to the next call."""
    seen = {"pid": os.getpid(), "given": os.environ.get("GIVEN"), "left": os.environ.get("LEFT"),
            "cwd": os.getcwd(), "random": random.random(), "handlers": len(logging.getLogger().handlers)}
    print(f"printed by {label}", flush=True)
    logging.getLogger().addHandler(logging.StreamHandler())
    logging.getLogger().warning("logged by %s", label)
    os.environ["LEFT"] = label
    os.chdir("/")
    random.seed(label)
    return seen


def _fails() -> None:
    raise ValueError("on purpose")


def _sleeps(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


@functools.lru_cache(maxsize=4)
def _tables(n: int):
    """A memo that keeps device arrays, as a kernel built once per shape keeps its tables."""
    import jax.numpy as jnp

    return jnp.arange(n)


def _memoizes(n: int) -> tuple[int, int]:
    _tables(n)
    return os.getpid(), _tables.cache_info().currsize


def _imports_jax_and_sets_a_flag() -> tuple[int, bool]:
    import jax

    found = bool(jax.config.values["jax_enable_x64"])
    jax.config.update("jax_enable_x64", True)
    return os.getpid(), found


@pytest.fixture
def warm():
    w = WarmProcess(WarmConfig(idle_s=30.0))
    yield w
    w.shutdown()


def test_calls_run_in_one_process_each_with_its_own_log_and_nothing_left_by_the_one_before(warm):
    random.seed(7)
    handles = [warm.submit(_changes_everything, f"call{i}", name=f"call{i}", env={"GIVEN": f"g{i}"}) for i in range(3)]
    seen = [h.result(timeout=60) for h in handles]
    assert len({s["pid"] for s in seen}) == 1 and seen[0]["pid"] != os.getpid() and warm.processes_started == 1
    assert [s["given"] for s in seen] == ["g0", "g1", "g2"]  # each its own variables ...
    assert {s["left"] for s in seen} == {None}  # ... and none of what the one before set
    assert len({s["cwd"] for s in seen}) == 1 and seen[0]["cwd"] != "/"
    assert len({s["random"] for s in seen}) == 1  # the random state as the process had it, each time
    assert len({s["handlers"] for s in seen}) == 1
    for i, h in enumerate(handles):
        log = h.logs()
        assert f"printed by call{i}" in log and f"logged by call{i}" in log
        assert not [j for j in range(3) if j != i and f"call{j}" in log], log
    assert warm.retirements == []


def test_free_while_no_call_runs_or_waits(warm):
    assert warm.free  # no process yet: a call would start one at once
    running = warm.submit(_sleeps, 1.0, name="running")
    assert not warm.free
    queued = warm.submit(_sleeps, 0.0, name="queued")
    assert not warm.free
    running.result(timeout=60)
    queued.result(timeout=60)
    assert warm.free and warm.processes_started == 1
    warm.shutdown()
    assert not warm.free


def test_a_failed_call_retires_the_process_and_the_next_starts_a_new_one(warm):
    first = warm.submit(_sleeps, 0.0).result(timeout=60)
    with pytest.raises(JobFailed, match="on purpose"):
        warm.submit(_fails, name="failing").result(timeout=60)
    assert warm.submit(_sleeps, 0.0).result(timeout=60) != first
    assert warm.processes_started == 2
    assert len(warm.retirements) == 1 and "failing" in warm.retirements[0] and "on purpose" in warm.retirements[0]


def test_a_killed_process_is_that_calls_death_alone_and_a_queued_call_cancelled_never_runs(warm):
    running = warm.submit(_sleeps, 60.0, name="long")
    queued = warm.submit(_sleeps, 0.0, name="queued")
    cancelled = warm.submit(_sleeps, 0.0, name="cancelled")
    cancelled.cancel()
    with pytest.raises(JobCancelled):
        cancelled.result(timeout=5)
    pid = running.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(JobFailed) as failed:
        running.result(timeout=30)
    assert failed.value.process_died
    assert queued.result(timeout=60) != pid and warm.processes_started == 2


def test_an_idle_process_exits_and_the_next_call_starts_another():
    warm = WarmProcess(WarmConfig(idle_s=0.3))
    try:
        first = warm.submit(_sleeps, 0.0).result(timeout=60)
        deadline = time.monotonic() + 30
        while warm.pid is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert warm.pid is None
        assert warm.submit(_sleeps, 0.0).result(timeout=60) != first
    finally:
        warm.shutdown()


def test_a_bad_config_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="idle_s must be a positive number of seconds, got 0"):
        WarmConfig(idle_s=0)
    with pytest.raises(ValueError, match="preload must be a tuple of module names"):
        WarmConfig(preload="jax")  # type: ignore[arg-type]


class _SlowToClose(logging.Handler):
    def close(self) -> None:
        time.sleep(60)


def _leaves_a_handler_slow_to_close() -> int:
    logging.getLogger("slow").addHandler(_SlowToClose())
    return os.getpid()


def test_a_process_that_does_not_come_back_clean_in_settle_s_is_killed_and_the_call_stands():
    warm = WarmProcess(WarmConfig(settle_s=1.0))
    try:
        first = warm.submit(_leaves_a_handler_slow_to_close, name="slow-cleanup").result(timeout=60)
        assert warm.submit(_sleeps, 0.0).result(timeout=60) != first
        assert len(warm.retirements) == 1 and "slow-cleanup" in warm.retirements[0]
        assert "did not come back" in warm.retirements[0] and "settle_s" in warm.retirements[0]
    finally:
        warm.shutdown()


def test_a_memo_holding_device_arrays_is_emptied_as_a_fresh_process_has_it_not_taken_for_a_leak(warm):
    first = warm.submit(_memoizes, 8, name="first").result(timeout=120)
    second = warm.submit(_memoizes, 16, name="second").result(timeout=120)
    assert first[0] == second[0] and warm.retirements == []  # one process, not retired
    assert first[1] == 1 and second[1] == 1  # the second call found the memo empty, as a fresh process would


def test_a_flag_set_by_the_call_that_imported_jax_is_put_back(warm):
    # No preload: the first call imports JAX itself, so no flags were there to be taken before it.
    first = warm.submit(_imports_jax_and_sets_a_flag, name="first").result(timeout=120)
    second = warm.submit(_imports_jax_and_sets_a_flag, name="second").result(timeout=120)
    assert first[0] == second[0] and warm.retirements == []  # one process, not retired
    assert (first[1], second[1]) == (False, False)  # the second found the flag as JAX's import sets it
