"""Pipeline stages on background threads that carry on from one shard to the next.

A stage runs a transform over the records of each shard of its input, in order, on its own
thread, and hands the results to the next stage through a bounded queue of events: a shard's
records sit between its start and end events, an error stands where that shard's transform
raised. Chained stages overlap (within the limits of the GIL), and because a stage's thread
serves every shard of a worker, the pipeline fills and drains once per worker, not per shard.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from zephyr.worker_context import WorkerContext, worker_context

__all__ = ["ShardStream", "Transform", "staged_shards"]

# Events of a multi-shard stream (see Dataset.run_shards): a shard's records sit between its
# start and end events; an error event stands where that shard's pipeline raised; done ends it.
_START, _ITEM, _ERROR, _END, _DONE = range(5)
# How often a blocked stage looks whether the run was stopped.
_STOP_POLL_SECONDS = 0.1

ShardStream = Iterator[tuple[int, Iterator[Any]]]
"""``(shard index, its records)`` for each shard, in order."""
Transform = Callable[[Iterator[Any]], Iterator[Any]]
"""What a stage does to one shard's records."""


class _Stopped(Exception):
    """The consumer went away: a stage thread ends quietly."""


class _Stage:
    """One background thread of a multi-shard stream, ending in a bounded queue of events.

    For each shard of ``upstream`` in order, the thread runs the shard's records through ``transform``
    under the shard's worker context and queues the results between the shard's start and end
    events. An error in one shard is queued where it happened and the thread goes on with the
    next shard (the consumer decides whether to stop).
    """

    def __init__(self, upstream: Callable[[], ShardStream], transform: Transform,
                 ctxs: Mapping[int, WorkerContext], size: int, stop: threading.Event):
        self._upstream = upstream
        self._transform = transform
        self._ctxs = ctxs
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._slots = threading.Semaphore(size)
        self._stop = stop
        self._thread = threading.Thread(target=self._run, name="zephyr-stage", daemon=True)
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def _put(self, kind: int, value: Any) -> None:
        # Only records take the bounded slots: a shard's start and end events never hold the
        # stage back (else the next shard could not start while this one's last records wait).
        if kind == _ITEM:
            while not self._slots.acquire(timeout=_STOP_POLL_SECONDS):
                if self._stop.is_set():
                    raise _Stopped
        if self._stop.is_set():
            raise _Stopped
        self._queue.put((kind, value))

    def _run(self) -> None:
        try:
            for shard, records in self._upstream():
                self._put(_START, shard)
                with worker_context(self._ctxs[shard]):
                    try:
                        for record in self._transform(records):
                            self._put(_ITEM, record)
                    except _Stopped:
                        raise
                    except BaseException as e:  # noqa: BLE001 - handed to the consumer, in order
                        self._put(_ERROR, e)
                self._put(_END, shard)
            self._put(_DONE, None)
        except _Stopped:
            return
        except BaseException as e:  # noqa: BLE001 - a broken stream: the consumer raises it
            try:
                self._put(_ERROR, e)
                self._put(_DONE, None)
            except _Stopped:
                return

    def shards(self) -> ShardStream:
        """The consumer side: ``(shard index, its records)`` for each shard, in order."""
        return _shards_of(self._events())

    def _events(self) -> Iterator[tuple[int, Any]]:
        while True:
            try:
                event = self._queue.get(timeout=_STOP_POLL_SECONDS)
            except queue.Empty:
                if not self._stop.is_set() and self._thread.is_alive():
                    continue
                # The thread may have queued its last events just after the wait above gave up.
                try:
                    event = self._queue.get_nowait()
                except queue.Empty:
                    raise RuntimeError("zephyr: a pipeline stage stopped before the end of its shards") from None
            if event[0] == _ITEM:
                self._slots.release()
            elif event[0] == _DONE:
                return
            yield event


class _ShardBody:
    """The records of one shard in an event stream: from after its start event to its end event.

    An error event raises its exception (the shard failed); the end event ends the iteration.
    """

    def __init__(self, events: Iterator[tuple[int, Any]]):
        self._events = events
        self.ended = False

    def __iter__(self) -> _ShardBody:
        return self

    def __next__(self) -> Any:
        if self.ended:
            raise StopIteration
        for kind, value in self._events:
            if kind == _ITEM:
                return value
            if kind == _ERROR:
                raise value
            self.ended = True  # _END
            raise StopIteration
        self.ended = True
        raise RuntimeError("zephyr: a pipeline stage ended in the middle of a shard")

    def drain(self) -> None:
        """Skip to the end event: what a ``take`` left unread, or the rest after an error."""
        while not self.ended:
            try:
                next(self)
            except StopIteration:
                return
            except Exception:  # noqa: BLE001,S112 - this shard's consumer has stopped taking records
                continue


def _shards_of(events: Iterator[tuple[int, Any]]) -> ShardStream:
    for kind, value in events:
        if kind == _ERROR:
            raise value  # the stream itself broke, outside any shard
        if kind != _START:
            raise RuntimeError(f"zephyr: expected the start of a shard in the event stream, got event {kind}")
        body = _ShardBody(events)
        yield value, body
        body.drain()


def staged_shards(source: Callable[[], ShardStream], transforms: Sequence[Transform], sizes: Sequence[int],
                  ctxs: Mapping[int, WorkerContext]) -> ShardStream:
    """The shards of ``source`` through ``transforms``, each but the last on its own stage thread.

    Args:
        source: opens the stream of each shard's source records (called on the first stage's thread).
        transforms: one more than ``sizes``: the first ``len(sizes)`` run on stage threads, the
            last on the consumer's thread as its records are taken.
        sizes: how many records each stage may compute ahead.
        ctxs: the worker context of each shard, set around its records on every stage.

    Closing the returned generator stops and joins the stage threads.
    """
    if len(transforms) != len(sizes) + 1:
        raise ValueError(f"need one transform more than stage sizes, got {len(transforms)} and {len(sizes)}")
    stop = threading.Event()
    stages: list[_Stage] = []
    upstream = source
    try:
        for transform, size in zip(transforms, sizes, strict=False):
            stages.append(_Stage(upstream, transform, ctxs, size, stop))
            upstream = stages[-1].shards
        for shard, body in upstream():
            yield shard, transforms[-1](body)
    finally:
        stop.set()
        for stage in stages:
            stage.join()
