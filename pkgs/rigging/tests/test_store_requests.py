"""The request rules on their own: timeouts, backoff with jitter and Retry-After, deadlines, counts.

(Against a real store that fails: ``tests/test_store_faults.py``.)"""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from rigging.store_requests import (
    DeadlineReached,
    RequestPolicy,
    RequestTally,
    RetryableAnswer,
    StoreUnavailable,
    TornAnswer,
    describe_counts,
    request_counts,
    retryable_status,
    store_deadline,
    with_retries,
    within,
)

FAST = RequestPolicy(timeout_s=0.2, deadline_s=3.0, base_delay_s=0.01, max_delay_s=0.05)


def _retryable(e: BaseException) -> bool:
    return isinstance(e, RetryableAnswer | TornAnswer | TimeoutError | ConnectionError)


def _run(failures: list[BaseException], *, policy: RequestPolicy = FAST, tally: RequestTally | None = None,
         hang_first: float = 0.0) -> tuple[str, int]:
    """Call an attempt that fails with each of ``failures`` in turn, then answers "ok"."""
    calls = []

    async def attempt(_limit: float) -> str:
        calls.append(1)
        if hang_first and len(calls) == 1:
            await asyncio.sleep(hang_first)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return "ok"

    result = asyncio.run(with_retries(attempt, kind="read", what="GET x", policy=policy, retryable=_retryable,
                                      tally=tally or RequestTally(), rng=random.Random(0)))
    return result, len(calls)


def test_retryable_answers_are_tried_again_and_counted_by_kind_and_cause():
    tally = RequestTally()
    failures = [RetryableAnswer(503), RetryableAnswer(429), ConnectionResetError(), TornAnswer("short")]
    assert _run(failures, tally=tally) == ("ok", 5)
    assert tally.snapshot() == {"requests": {"read": 5}, "retries": {"read": 4},
                                "causes": {"503": 1, "429": 1, "reset": 1, "torn": 1}, "failed": {}}


def test_an_answer_not_worth_another_try_is_raised_at_once():
    tally = RequestTally()
    with pytest.raises(FileNotFoundError):
        _run([FileNotFoundError("x")], tally=tally)
    assert tally.snapshot()["requests"] == {"read": 1} and tally.snapshot()["retries"] == {}
    assert all(retryable_status(s) for s in (408, 429, 500, 502, 503, 504))
    assert not any(retryable_status(s) for s in (400, 401, 403, 404, 409, 412))


def test_an_attempt_that_hangs_is_abandoned_after_its_timeout_and_tried_again():
    started = time.monotonic()
    assert _run([], hang_first=30.0) == ("ok", 2)
    assert time.monotonic() - started < 2.0


def test_a_call_that_keeps_failing_gives_up_at_its_deadline_naming_the_request_and_the_last_answer():
    policy = RequestPolicy(timeout_s=0.2, deadline_s=0.5, base_delay_s=0.05, max_delay_s=0.1)
    tally = RequestTally()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as info:
        _run([RetryableAnswer(503, "Service Unavailable")] * 1000, policy=policy, tally=tally)
    assert time.monotonic() - started < 1.0
    assert "GET x: the store did not answer in" in str(info.value) and "the last: 503" in str(info.value)
    assert "MARIN_STORE_DEADLINE" in str(info.value) and not isinstance(info.value, DeadlineReached)
    assert tally.snapshot()["failed"] == {"read": 1}


def test_the_callers_deadline_comes_first_and_is_carried_into_another_threads_loop():
    # Requests run on fsspec's loop in its own thread: the deadline of the thread that asked travels.
    async def forever(_limit: float) -> str:
        await asyncio.sleep(30)
        return "never"

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        with store_deadline(time.time() + 0.3):
            from rigging.store_requests import caller_deadline

            future = asyncio.run_coroutine_threadsafe(within(caller_deadline(), lambda: with_retries(
                forever, kind="write", what="POST y", policy=RequestPolicy(), retryable=_retryable)), loop)
            started = time.monotonic()
            with pytest.raises(DeadlineReached, match="POST y: not answered before the caller's deadline"):
                future.result(timeout=10)
            assert time.monotonic() - started < 2.0
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def test_deadlines_nest_to_the_earliest():
    from rigging.store_requests import caller_deadline

    assert caller_deadline() is None
    with store_deadline(100.0):
        with store_deadline(200.0):
            assert caller_deadline() == 100.0
        with store_deadline(50.0):
            assert caller_deadline() == 50.0
        assert caller_deadline() == 100.0
    assert caller_deadline() is None


def test_backoff_is_capped_exponential_with_jitter_and_honours_retry_after():
    policy = RequestPolicy(base_delay_s=0.5, max_delay_s=16.0, retry_after_cap_s=60.0)
    rng = random.Random(1)
    for retry in range(1, 12):
        ceiling = min(16.0, 0.5 * 2 ** (retry - 1))
        waits = [policy.delay(retry, None, rng) for _ in range(50)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits) and len(set(waits)) > 40  # jittered
    assert policy.delay(1, 7.0, rng) >= 7.0  # Retry-After is a floor...
    assert policy.delay(1, 600.0, rng) == 60.0  # ...up to its cap


def test_settings_come_from_the_environment_and_bad_ones_name_the_variable(monkeypatch):
    monkeypatch.setenv("MARIN_STORE_TIMEOUT", "7.5")
    monkeypatch.setenv("MARIN_STORE_DEADLINE", "30")
    assert RequestPolicy.from_environ() == RequestPolicy(timeout_s=7.5, deadline_s=30.0)
    for bad in ("0", "-1", "soon", "nan"):
        monkeypatch.setenv("MARIN_STORE_TIMEOUT", bad)
        with pytest.raises(ValueError, match="MARIN_STORE_TIMEOUT must be a positive number of seconds"):
            RequestPolicy.from_environ()
    with pytest.raises(ValueError, match="deadline_s must be a positive number"):
        RequestPolicy(deadline_s=0)


def test_counts_since_a_snapshot_and_in_one_line():
    before = request_counts()
    assert request_counts(since=before) == {"requests": {}, "retries": {}, "causes": {}, "failed": {}}
    counts = {"requests": {"read": 40, "write": 3, "list": 40}, "retries": {"read": 2}, "causes": {"503": 2}}
    assert describe_counts(counts) == "83 requests (list 40, read 40, write 3), 2 retried (503 2)"
    assert describe_counts({"requests": {"stat": 1}}) == "1 request (stat 1), none retried"
    assert describe_counts({"requests": {}}) is None and describe_counts(None) is None
    assert describe_counts({"requests": {"read": "x"}, "failed": []}) is None  # a damaged record
