"""One thread runs the decoder (``Engine.step`` while anything is in flight); the server's asyncio
handlers submit requests from the event loop and receive each request's progress on an
``asyncio.Queue``, handed over with ``loop.call_soon_threadsafe`` (the engine calls listeners on its
own thread)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["FAILED", "EngineLoop", "Progress"]

FAILED = "error"
"""The ``finish_reason`` of a request in flight when the decoder failed."""

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Progress:
    """A request's completion so far, as copied on the engine's thread."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    finish_reason: str | None
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...] = ()
    """At each token, the alternatives the request asked for (``(id, log-probability)``, likeliest first)."""


class EngineLoop:
    """The decoder's thread. :meth:`submit` from the event loop; :meth:`stop` ends the thread (what is
    still in flight is cancelled).

    Args:
        engine: a ``levanter.inference.Engine`` with a tokenizer (``decode_text``).
    """

    def __init__(self, engine: Any):
        self.engine = engine
        self.submitted = 0
        """Requests taken (a count for /health and its tests)."""
        self.cancelled = 0
        """Requests ended by a cancel (a client gone, a shutdown)."""
        self._wake = threading.Event()
        self._stopping = False
        self._live: dict[int, Any] = {}  # the requests in flight, by their completion's id
        self._lock = threading.Lock()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="marin-serve-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def in_flight(self) -> int:
        """Requests waiting or decoding now."""
        with self._lock:
            return len(self._live)

    def check(self, prompt_ids: Sequence[int], sampling: Any, top_logprobs: int = 0) -> None:
        """Raise ValueError (one line) if the engine cannot serve this request."""
        self.engine.check(prompt_ids, sampling, top_logprobs)

    def submit(self, prompt_ids: Sequence[int], sampling: Any, queue: asyncio.Queue[tuple[int, Progress]],
               tag: int = 0, *, top_logprobs: int = 0) -> Any:
        """Queue a request (on the event loop's thread), keeping ``top_logprobs`` alternatives at each
        token; its progress arrives on ``queue`` as ``(tag, Progress)`` (the last with a
        ``finish_reason``). Returns the engine's request."""
        if self._stopping or self._failure is not None:
            raise RuntimeError("the server is shutting down" if self._failure is None
                               else f"the decoder failed: {self._failure!r}")
        loop = asyncio.get_running_loop()

        def listener(completion: Any, _new: int) -> None:
            progress = Progress(tuple(completion.token_ids), tuple(completion.logprobs), completion.text or "",
                                completion.finish_reason, tuple(map(tuple, completion.top_logprobs)))
            if progress.finish_reason is not None:
                with self._lock:  # taken by submit until the request is in _live
                    self._live.pop(id(completion), None)
            if progress.finish_reason == "cancelled":
                self.cancelled += 1
            loop.call_soon_threadsafe(queue.put_nowait, (tag, progress))

        with self._lock:
            request = self.engine.submit(prompt_ids, sampling, listener, top_logprobs=top_logprobs)
            self._live[id(request.completion)] = request
            self.submitted += 1
        self._wake.set()
        return request

    def cancel(self, request: Any) -> None:
        """End ``request`` at the engine's next step (its slot is freed)."""
        self.engine.cancel(request)
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Cancel what is in flight and end the thread."""
        self._stopping = True
        with self._lock:
            live = list(self._live.values())
        for request in live:
            self.engine.cancel(request)
        self._wake.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            while True:
                self._wake.clear()
                if self.engine.busy:
                    self.engine.step()
                    continue
                if self._stopping:
                    return
                self._wake.wait(0.5)
        except BaseException as e:  # noqa: BLE001 - reported to every request in flight and later, and logged
            self._failure = e
            log.exception("the decoder failed; the server refuses new requests")
            with self._lock:
                live = list(self._live.values())
            for request in live:  # their clients get an error now rather than waiting for ever
                request.completion.finish_reason = FAILED
                request.listener(request.completion, 0)
