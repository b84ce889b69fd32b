"""Stage threads (zephyr.stages) as Dataset.run_shards uses them: order, contexts, overlap, errors, shutdown."""

from __future__ import annotations

import threading

import pytest

from testsupport import zephyr_data as helpers
from zephyr import Dataset, WorkerContext, current_context
from zephyr.stages import staged_shards


def _shard(ds: Dataset, i: int) -> list:
    return list(ds.iter_shard(WorkerContext(shard_index=i, num_shards=ds.num_shards)))


def _ctxs(ds: Dataset, indices: list[int]) -> list[WorkerContext]:
    return [WorkerContext(shard_index=i, num_shards=ds.num_shards) for i in indices]


def _stage_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "zephyr-stage"]


def test_run_shards_gives_what_each_shard_gives_alone() -> None:
    ds = (Dataset.from_items([range(10), [], range(10, 23), range(30, 35)])
          .map(helpers.double).batch(3).prefetch(1).flat_map(list).filter(helpers.is_even).prefetch(2)
          .take_per_shard(4).map(helpers.double))
    alone = {i: _shard(ds, i) for i in range(4)}
    for indices in ([0, 1, 2, 3], [3, 1, 2], [2]):
        got = list(ds.run_shards(_ctxs(ds, indices), lambda ctx, records: (ctx.shard_index, list(records))))
        assert got == [(i, alone[i]) for i in indices]
    assert alone[1] == [] and alone[2] == [40, 44, 48, 52]
    assert not _stage_threads()


def test_run_shards_keeps_each_shards_context_and_counters() -> None:
    ds = Dataset.from_items([[1, 2], [3], [4, 5, 6]]).map(helpers.tag_with_context).prefetch(1).map(helpers.tag_second)
    ctxs = _ctxs(ds, [0, 1, 2])
    records = list(ds.run_shards(ctxs, lambda ctx, records: list(records)))
    assert [[(x, shard) for x, shard, *_ in shard_records] for shard_records in records] == [
        [(1, 0), (2, 0)], [(3, 1)], [(4, 2), (5, 2), (6, 2)]]
    assert [dict(c.counters) for c in ctxs] == [{"seen": 2, "total": 3, "second": 2}, {"seen": 1, "total": 3, "second": 1},
                                                {"seen": 3, "total": 15, "second": 3}]


def test_run_shards_reads_the_next_shard_while_this_one_is_consumed() -> None:
    started = threading.Event()

    def note(x: int) -> int:
        if current_context().shard_index == 1:
            started.set()
        return x

    ds = Dataset.from_items([range(5), range(5, 10)]).map(note).prefetch(2)

    def consume(ctx: WorkerContext, records) -> tuple[list[int], bool]:
        taken = list(records)
        # Shard 0 is taken to its end but not yet returned: its commit would run here.
        overlapped = started.wait(timeout=10) if ctx.shard_index == 0 else True
        return taken, overlapped

    results = list(ds.run_shards(_ctxs(ds, [0, 1]), consume))
    assert results == [([0, 1, 2, 3, 4], True), ([5, 6, 7, 8, 9], True)]


def test_run_shards_raises_a_shards_error_from_that_shard_only() -> None:
    ds = Dataset.from_items([[1, 2], [6, 7, 8], [9]]).prefetch(1).map(helpers.fail_on_seven).prefetch(1)
    seen = []
    results = ds.run_shards(_ctxs(ds, [0, 1, 2]), lambda ctx, records: seen.append((ctx.shard_index, list(records))))
    next(results)
    assert seen == [(0, [1, 2])]
    with pytest.raises(ValueError, match="seven is not allowed"):
        next(results)
    assert seen == [(0, [1, 2])]  # shard 1 failed inside its records; shard 2 never reached
    results.close()
    assert not _stage_threads()


def test_run_shards_stops_its_threads_when_the_consumer_fails() -> None:
    ds = Dataset.from_items([range(100_000), range(100_000)]).prefetch(1).map(helpers.double).prefetch(1)

    def consume(ctx: WorkerContext, records) -> None:
        next(records)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        list(ds.run_shards(_ctxs(ds, [0, 1]), consume))
    assert not _stage_threads()


def test_staged_shards_chains_transforms_and_checks_their_count() -> None:
    ctxs = {i: WorkerContext(shard_index=i, num_shards=2) for i in range(2)}

    def source():
        yield 0, iter([1, 2])
        yield 1, iter([3])

    def add_one(records):
        return (r + 1 for r in records)

    def times_ten(records):
        return (r * 10 for r in records)

    streams = staged_shards(source, [add_one, add_one, times_ten], [1, 3], ctxs)
    assert [(shard, list(records)) for shard, records in streams] == [(0, [30, 40]), (1, [50])]
    assert not _stage_threads()
    with pytest.raises(ValueError, match="one transform more than stage sizes, got 2 and 2"):
        next(staged_shards(source, [add_one, add_one], [1, 1], ctxs))


def test_the_last_events_of_a_stage_that_just_ended_are_read_not_taken_for_a_crash() -> None:
    # The consumer's wait can give up just before the thread queues its last events and ends: the
    # consumer must then read them, not report a stage that stopped early (seen under load).
    import queue

    from zephyr.stages import _Stage

    ctxs = {0: WorkerContext(shard_index=0, num_shards=1)}
    stage = _Stage(lambda: iter([(0, iter([1, 2]))]), lambda records: records, ctxs, 4, threading.Event())
    stage.join()  # every event is queued and the thread is gone

    class GivesUpOnce:
        def __init__(self, inner: queue.SimpleQueue):
            self.inner, self.gave_up = inner, False

        def get(self, timeout: float):
            if not self.gave_up:
                self.gave_up = True
                raise queue.Empty
            return self.inner.get(timeout=timeout)

        def get_nowait(self):
            return self.inner.get_nowait()

    stage._queue = GivesUpOnce(stage._queue)  # type: ignore[assignment]
    assert [(shard, list(records)) for shard, records in stage.shards()] == [(0, [1, 2])]
