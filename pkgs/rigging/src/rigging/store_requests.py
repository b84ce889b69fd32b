"""How long a request to an object store may take, when it is tried again, and how many were made.

Every request the engine sends to an object store (``gs://``: :mod:`rigging.gcs`) goes through
:func:`with_retries`:

* **a timeout on every attempt**: an attempt that makes no progress for :attr:`RequestPolicy.timeout_s`
  (no connection, no answer, no byte of a download) is abandoned; one that sends a body may take
  ``timeout_s`` more than sending it at :data:`MIN_RATE` would;
* **capped exponential backoff with jitter** between attempts, for the answers worth trying again
  (:func:`retryable_status`: 408, 429, 5xx; and resets, cut answers, timeouts): the n-th wait is
  drawn in ``[d/2, d]`` with ``d = min(max_delay_s, base_delay_s * 2**(n-1))``, and is at least the
  answer's ``Retry-After`` (up to :attr:`RequestPolicy.retry_after_cap_s`);
* **a deadline on every call**: all attempts and waits of one call end within
  :attr:`RequestPolicy.deadline_s`, or sooner when the caller set a deadline of its own
  (:func:`store_deadline`: a lease holder's fenced writes end before the lease could expire); then
  :class:`StoreUnavailable` (an ``OSError``) names the request, the attempts and the last answer;
* **counted**: every attempt, by kind of request, and every retry, by kind and by cause, in the
  process's :data:`TALLY` (:func:`request_counts`), which the engine records in each build's
  provenance and shows in ``marin run`` and ``marin status``.

Settings (read when a file system is made, so child processes inherit them):
``MARIN_STORE_TIMEOUT`` (seconds, default 20) and ``MARIN_STORE_DEADLINE`` (seconds, default 120),
or ``store_timeout`` and ``store_deadline`` in the configuration (``marin`` puts them in the
environment).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import random

__all__ = ["DEADLINE_ENV", "MIN_RATE", "TALLY", "TIMEOUT_ENV", "DeadlineReached", "RequestPolicy", "RequestTally", "RetryableAnswer",
           "StoreUnavailable", "TornAnswer", "caller_deadline", "describe_counts", "request_counts",
           "retryable_status", "store_deadline", "with_retries"]

T = TypeVar("T")

MIN_RATE = 1 << 20
"""Bytes per second a request body is allowed to take to send (on top of the attempt's timeout)."""

_RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
TIMEOUT_ENV = "MARIN_STORE_TIMEOUT"
"""The variable of :attr:`RequestPolicy.timeout_s` (``store_timeout`` in the configuration)."""
DEADLINE_ENV = "MARIN_STORE_DEADLINE"
"""The variable of :attr:`RequestPolicy.deadline_s` (``store_deadline`` in the configuration)."""


def retryable_status(status: int) -> bool:
    """Whether an answer with this HTTP status is worth trying again (the store may answer the next one)."""
    return status in _RETRYABLE_STATUS


class StoreUnavailable(OSError):
    """The store did not answer one request within its deadline (every attempt failed)."""


class DeadlineReached(StoreUnavailable):
    """The caller's own deadline (:func:`store_deadline`) came before the request could be answered."""


class RetryableAnswer(Exception):
    """An answer worth trying again (:func:`retryable_status`), with its ``Retry-After`` in seconds."""

    def __init__(self, status: int, message: str = "", retry_after: float | None = None):
        super().__init__(f"{status} {message}".strip())
        self.status = status
        self.retry_after = retry_after


class TornAnswer(Exception):
    """An answer shorter than it says, or whose content does not match the hash the store sent."""


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a positive number of seconds, got {raw!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {raw!r}")
    return value


@dataclass(frozen=True)
class RequestPolicy:
    """How requests are timed and retried (see the module docstring)."""

    timeout_s: float = 20.0
    """An attempt making no progress for this long is abandoned."""
    deadline_s: float = 120.0
    """The longest one call may take, all its attempts and waits together."""
    base_delay_s: float = 0.5
    """The first wait between attempts (before jitter)."""
    max_delay_s: float = 16.0
    """The longest wait between two attempts (before ``Retry-After``)."""
    retry_after_cap_s: float = 60.0
    """The longest ``Retry-After`` honoured."""

    def __post_init__(self) -> None:
        for name in ("timeout_s", "deadline_s", "base_delay_s", "max_delay_s", "retry_after_cap_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")

    @classmethod
    def from_environ(cls) -> RequestPolicy:
        """The policy ``MARIN_STORE_TIMEOUT`` and ``MARIN_STORE_DEADLINE`` ask for (defaults otherwise).

        Raises:
            ValueError: a variable is not a positive number of seconds (the message names it).
        """
        return cls(timeout_s=_seconds(TIMEOUT_ENV, cls.timeout_s), deadline_s=_seconds(DEADLINE_ENV, cls.deadline_s))

    def attempt_limit(self, body_bytes: int) -> float:
        """The most one attempt that sends ``body_bytes`` may take."""
        return self.timeout_s + body_bytes / MIN_RATE

    def delay(self, retry: int, retry_after: float | None, rng: random.Random) -> float:
        """The wait before retry number ``retry`` (1 for the first)."""
        ceiling = min(self.max_delay_s, self.base_delay_s * 2 ** (retry - 1))
        wait = ceiling * rng.uniform(0.5, 1.0)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.retry_after_cap_s))
        return wait


# -- counting -------------------------------------------------------------------------------------

class RequestTally:
    """Requests and retries of this process, by kind of request (``read``, ``write`` ...), and retries
    by cause (``503``, ``timeout``, ``reset`` ...)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: Counter = Counter()
        self._retries: Counter = Counter()
        self._causes: Counter = Counter()
        self._failed: Counter = Counter()

    def request(self, kind: str) -> None:
        with self._lock:
            self._requests[kind] += 1

    def retry(self, kind: str, cause: str) -> None:
        with self._lock:
            self._retries[kind] += 1
            self._causes[cause] += 1

    def failed(self, kind: str) -> None:
        with self._lock:
            self._failed[kind] += 1

    def snapshot(self) -> dict[str, Any]:
        """``{"requests": {kind: n}, "retries": {kind: n}, "causes": {cause: n}, "failed": {kind: n}}``."""
        with self._lock:
            return {"requests": dict(self._requests), "retries": dict(self._retries), "causes": dict(self._causes),
                    "failed": dict(self._failed)}


def request_counts(since: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What :data:`TALLY` counted (since the ``since`` snapshot, if given), without zero entries."""
    now = TALLY.snapshot()
    if since is None:
        return now
    return {part: {k: n - since.get(part, {}).get(k, 0) for k, n in counts.items()
                   if n - since.get(part, {}).get(k, 0)} for part, counts in now.items()}


def describe_counts(counts: Mapping[str, Any] | None) -> str | None:
    """One line for people: ``"143 requests (read 40, list 30, ...), 6 retried (503 3, timeout 2, ...)"``
    of what :func:`request_counts` gave (None when it counted no request)."""
    if not isinstance(counts, Mapping):
        return None
    parts: dict[str, Mapping[str, Any]] = {}
    for part in ("requests", "retries", "causes", "failed"):
        by = counts.get(part)
        parts[part] = {k: n for k, n in by.items() if isinstance(n, int)} if isinstance(by, Mapping) else {}

    def listed(by: Mapping[str, Any]) -> str:
        return ", ".join(f"{k} {n}" for k, n in sorted(by.items(), key=lambda kv: (-kv[1], kv[0])))

    total = sum(parts["requests"].values())
    if not total:
        return None
    line = f"{total} request{'s' if total != 1 else ''} ({listed(parts['requests'])})"
    retried = sum(parts["retries"].values())
    line += f", {retried} retried ({listed(parts['causes'])})" if retried else ", none retried"
    failed = sum(parts["failed"].values())
    return line + (f", {failed} given up ({listed(parts['failed'])})" if failed else "")


TALLY = RequestTally()
"""This process's requests (one tally per process, as a logger is: forked workers start from the
parent's counts, so they report what they made since they started, :func:`request_counts`)."""


# -- deadlines --------------------------------------------------------------------------------------

_THREAD = threading.local()
_TASK_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("store_deadline", default=None)


@contextlib.contextmanager
def store_deadline(at: float) -> Iterator[None]:
    """Requests made by this thread inside the block give up (:class:`DeadlineReached`) by the wall
    time ``at`` (``time.time()``), the earlier of it and any deadline set outside."""
    before = getattr(_THREAD, "deadline", None)
    _THREAD.deadline = at if before is None else min(before, at)
    try:
        yield
    finally:
        _THREAD.deadline = before


def caller_deadline() -> float | None:
    """The deadline this thread's requests must meet (:func:`store_deadline`), or None."""
    return getattr(_THREAD, "deadline", None)


async def within(deadline: float | None, make: Callable[[], Awaitable[T]]) -> T:
    """Await ``make()`` with ``deadline`` in force for the requests it makes (they run in another
    thread's event loop: the deadline is carried into its task)."""
    token = _TASK_DEADLINE.set(deadline)
    try:
        return await make()
    finally:
        _TASK_DEADLINE.reset(token)


# -- the loop --------------------------------------------------------------------------------------

def cause_of(error: BaseException) -> str:
    """A short name for why an attempt failed: its status, ``timeout``, ``reset``, ``torn``, or the error's type."""
    if isinstance(error, RetryableAnswer):
        return str(error.status)
    if isinstance(error, TimeoutError):  # asyncio's too
        return "timeout"
    if isinstance(error, TornAnswer):
        return "torn"
    # By the names of its classes: the HTTP client's (aiohttp's) are not imported here.
    names = " ".join(c.__name__ for c in type(error).__mro__)
    if "Payload" in names:
        return "torn"
    if isinstance(error, ConnectionError) or "Connection" in names or "Disconnected" in names:
        return "reset"
    return type(error).__name__


async def with_retries(attempt: Callable[[float], Awaitable[T]], *, kind: str, what: str, policy: RequestPolicy,
                       retryable: Callable[[BaseException], bool], body_bytes: int = 0,
                       on_retry: Callable[[BaseException], None] | None = None, hard_limit: bool = True,
                       rng: random.Random | None = None, tally: RequestTally | None = None) -> T:
    """Await ``attempt(limit)`` until it returns, tried again after the errors ``retryable`` accepts.

    Args:
        attempt: one attempt; ``limit`` is the seconds it may take (it is cancelled after that).
        kind: the kind of request, for counting; ``what``: the request, for messages.
        retryable: which errors are worth another attempt.
        body_bytes: what an attempt sends (it may take longer to send more).
        on_retry: told of each failed attempt that will be tried again (before the wait).
        hard_limit: cancel an attempt after :meth:`RequestPolicy.attempt_limit`; off, only the
            call's deadline cuts it short (a download, bounded by its progress by the caller).

    Raises:
        StoreUnavailable: the call's deadline came (:class:`DeadlineReached`: the caller's own).
        Exception: what the last attempt raised when it is not worth another.
    """
    # Not at import: rigging.filesystem imports this module for local work too.
    import asyncio
    import random

    tally = tally if tally is not None else TALLY
    rng = rng if rng is not None else random.Random()
    started = time.monotonic()
    ends = started + policy.deadline_s
    own = _TASK_DEADLINE.get()
    if own is not None:
        ends = min(ends, started + (own - time.time()))
    tries = 0
    while True:
        left = ends - time.monotonic()
        if left <= 0:
            tally.failed(kind)
            raise _gave_up(what, tries, started, None, own is not None and ends < started + policy.deadline_s)
        tries += 1
        tally.request(kind)
        limit = min(policy.attempt_limit(body_bytes), left) if hard_limit else left
        try:
            async with asyncio.timeout(limit):
                return await attempt(limit)
        except Exception as e:
            if not retryable(e):
                raise
            retry_after = e.retry_after if isinstance(e, RetryableAnswer) else None
            wait = policy.delay(tries, retry_after, rng)
            if time.monotonic() + wait >= ends:
                tally.failed(kind)
                raise _gave_up(what, tries, started, e, own is not None and ends < started + policy.deadline_s) from e
            if on_retry is not None:
                on_retry(e)
            tally.retry(kind, cause_of(e))
        await asyncio.sleep(wait)


def _gave_up(what: str, tries: int, started: float, last: BaseException | None, callers: bool) -> StoreUnavailable:
    spent = time.monotonic() - started
    said = str(last) if last is not None else ""
    tail = (f"; the last: {said if said.startswith(cause_of(last)) else f'{cause_of(last)} ({said})' if said else cause_of(last)}"
            if last is not None else "")
    if callers:
        return DeadlineReached(f"{what}: not answered before the caller's deadline ({tries} attempt(s) in "
                               f"{spent:.1f}s{tail})")
    return StoreUnavailable(f"{what}: the store did not answer in {spent:.0f}s ({tries} attempt(s){tail}); "
                            f"{DEADLINE_ENV} sets how long a request may take")
