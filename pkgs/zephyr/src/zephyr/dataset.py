"""A lazy, sharded dataset: a source cut into shards plus a chain of per-record transforms.

Nothing runs until :meth:`Dataset.write` or :meth:`Dataset.collect`; then every shard runs as
one job on a ``fray`` client (a local process each by default), at most ``max_parallel`` at a
time. Transforms are applied to each shard independently and in order, so functions given to
``map``/``filter``/``flat_map`` must be importable (module-level functions or
``functools.partial`` of them) to reach the worker processes.

``prefetch`` runs the steps before it (back to the previous ``prefetch``) on a background thread
(:mod:`zephyr.stages`), so stages overlap; the GIL limits this to work that releases it. When a
worker runs several shards, those threads carry on from one shard to the next
(:meth:`Dataset.run_shards`), so the pipeline fills and drains once per worker, not once per shard.

``group_by`` (and ``deduplicate``, ``count_by`` built on it) brings records with equal keys
together across shards: a shuffle through files, deterministic and resumable (:mod:`zephyr.shuffle`).

>>> ds = Dataset.from_files("corpus/*.jsonl").map(str.lower).filter(bool).take_per_shard(1000)
>>> result = ds.write(JsonlSink("out/"))  # doctest: +SKIP
"""

from __future__ import annotations

import abc
import functools
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from zephyr.readers import OnError, Reader, RecordFn, TextMode, expand_paths, reader_for_path
from zephyr.shuffle import (
    GroupBy,
    KeyFn,
    Reducer,
    callable_label,
    count_records,
    identity,
    keep_first,
    key_only,
)
from zephyr.sources import FileShard, ItemShard, ShardSource, plan_file_shards
from zephyr.stages import ShardStream, staged_shards
from zephyr.worker_context import WorkerContext, worker_context

if TYPE_CHECKING:
    from fray import DistributedClient
    from zephyr.execution import RunResult
    from zephyr.writers import Sink

__all__ = ["Dataset", "FileShard", "ItemShard", "ShardSource", "plan_file_shards"]

T = TypeVar("T")


class _Op(abc.ABC):
    @abc.abstractmethod
    def apply(self, records: Iterator[Any]) -> Iterator[Any]: ...


@dataclass(frozen=True)
class _Map(_Op):
    fn: Callable[[Any], Any]

    def apply(self, records):
        return map(self.fn, records)


@dataclass(frozen=True)
class _Filter(_Op):
    predicate: Callable[[Any], bool]

    def apply(self, records):
        return filter(self.predicate, records)


@dataclass(frozen=True)
class _FlatMap(_Op):
    fn: Callable[[Any], Iterable[Any]]

    def apply(self, records):
        return itertools.chain.from_iterable(map(self.fn, records))


@dataclass(frozen=True)
class _Take(_Op):
    count: int

    def apply(self, records):
        return itertools.islice(records, self.count)


@dataclass(frozen=True)
class _Batch(_Op):
    size: int

    def apply(self, records):
        iterator = iter(records)
        while batch := list(itertools.islice(iterator, self.size)):
            yield batch


@dataclass(frozen=True)
class _Prefetch:
    """A stage boundary: what comes before it runs on a background thread (see zephyr.stages)."""

    size: int


def _apply(ops: Sequence[_Op], records: Iterator[Any]) -> Iterator[Any]:
    for op in ops:
        records = op.apply(records)
    return records


def _source_shards(dataset: Dataset, ctxs: Sequence[WorkerContext]) -> ShardStream:
    # The first stage's input: each shard's source records, opened when the stage reaches it.
    for ctx in ctxs:
        records = dataset.shards[ctx.shard_index].records(ctx)
        try:
            yield ctx.shard_index, records
        finally:
            close = getattr(records, "close", None)
            if close is not None:
                close()




class Dataset:
    """A lazy sharded pipeline; every method returns a new dataset and runs nothing."""

    def __init__(self, shards: Sequence[ShardSource], ops: Sequence[_Op | _Prefetch] = ()):
        if not shards:
            raise ValueError("a dataset needs at least one shard, got 0")
        self._shards = tuple(shards)
        self._ops = tuple(ops)

    @classmethod
    def from_files(
        cls,
        source: str | Iterable[str],
        *,
        num_shards: int | None = None,
        reader: Reader | None = None,
        text_field: str = "text",
        text_mode: TextMode | str = TextMode.LINES,
        on_error: OnError | str = OnError.RAISE,
        record_fn: RecordFn | None = None,
    ) -> Dataset:
        """Documents of the files in ``source`` (paths, globs, folders), sharded by
        :func:`plan_file_shards`; the reader is chosen per file by extension unless given.
        With ``record_fn``, JSON objects and Parquet rows are turned into records by it."""
        files = expand_paths(source)
        readers = [
            reader or reader_for_path(f, text_field=text_field, text_mode=text_mode, on_error=on_error,
                                      record_fn=record_fn)
            for f in files
        ]
        return cls(plan_file_shards(files, readers, num_shards))

    @classmethod
    def from_items(cls, shards: Sequence[Iterable[Any]]) -> Dataset:
        """A dataset whose shard ``i`` holds the records ``shards[i]``."""
        return cls([ItemShard(tuple(items)) for items in shards])

    @property
    def num_shards(self) -> int:
        """How many shards the dataset has (and jobs a run submits, less committed ones)."""
        return len(self._shards)

    @property
    def shards(self) -> tuple[ShardSource, ...]:
        """The shard sources, in order."""
        return self._shards

    def _then(self, op: _Op | _Prefetch) -> Dataset:
        return Dataset(self._shards, self._ops + (op,))

    def map(self, fn: Callable[[Any], Any]) -> Dataset:
        """Replace each record ``r`` by ``fn(r)``."""
        return self._then(_Map(fn))

    def filter(self, predicate: Callable[[Any], bool]) -> Dataset:
        """Keep the records for which ``predicate`` is true."""
        return self._then(_Filter(predicate))

    def flat_map(self, fn: Callable[[Any], Iterable[Any]]) -> Dataset:
        """Replace each record by the records ``fn`` returns for it."""
        return self._then(_FlatMap(fn))

    def take_per_shard(self, count: int) -> Dataset:
        """Keep at most the first ``count`` records of each shard."""
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        return self._then(_Take(count))

    def batch(self, size: int) -> Dataset:
        """Group consecutive records of a shard into lists of ``size`` (the last may be shorter)."""
        if size <= 0:
            raise ValueError(f"batch size must be > 0, got {size}")
        return self._then(_Batch(size))

    def prefetch(self, size: int = 2) -> Dataset:
        """Compute up to ``size`` records ahead in a background thread (order and errors kept)."""
        if size <= 0:
            raise ValueError(f"prefetch size must be > 0, got {size}")
        return self._then(_Prefetch(size))

    def group_by(
        self,
        key: KeyFn,
        reducer: Reducer,
        *,
        num_partitions: int | None = None,
        sort_within: Callable[[Any], Any] | None = None,
        work_path: str | None = None,
        name: str = "group_by",
    ) -> Dataset:
        """Group records with equal ``key(record)`` across all shards; each group becomes ``reducer(key, records)``.

        The result has ``num_partitions`` shards of reducer outputs, groups in the byte order of
        their keys' canonical JSON; a reducer sees its group's records in input order (shard, then
        position), or sorted by ``sort_within(record)``. Keys and records must be JSON values.
        Semantics, files and resume: :mod:`zephyr.shuffle`.

        Args:
            key: gives each record's key (a JSON value).
            reducer: ``(key, records iterator) -> iterable of outputs`` for one group.
            num_partitions: reduce tasks and output shards (default: this dataset's shard count).
            sort_within: orders each group's records before the reducer sees them.
            work_path: folder for the partition files (default: the folder of the sink written to).
            name: the stage's folder under ``<work>/.shuffle/``; distinct per stage of a pipeline.
        """
        stage = GroupBy(self, key, reducer, self.num_shards if num_partitions is None else num_partitions,
                        sort_within, work_path, name)
        return Dataset(stage.pending())

    def deduplicate(
        self,
        key: KeyFn,
        *,
        sort_within: Callable[[Any], Any] | None = None,
        num_partitions: int | None = None,
        work_path: str | None = None,
        name: str = "deduplicate",
    ) -> Dataset:
        """Keep one record per key: the first in input order, or the least by ``sort_within``
        (ties in input order). Arguments as for :meth:`group_by`."""
        return self.group_by(key, keep_first, num_partitions=num_partitions, sort_within=sort_within,
                             work_path=work_path, name=name)

    def count_by(
        self,
        key: KeyFn,
        *,
        num_partitions: int | None = None,
        work_path: str | None = None,
        name: str = "count_by",
    ) -> Dataset:
        """One ``{"key": k, "count": n}`` per distinct key. Arguments as for :meth:`group_by`."""
        # Only the key travels through the shuffle files, not the record.
        keys = self.map(functools.partial(key_only, key))
        stage = GroupBy(keys, identity, count_records, self.num_shards if num_partitions is None else num_partitions,
                        None, work_path, name, key_label=callable_label(key))
        return Dataset(stage.pending())

    def replace_shards(self, shards: Sequence[ShardSource]) -> Dataset:
        """The same transforms over other shard sources, as many (the driver's view of a stage that has run)."""
        if len(shards) != len(self._shards):
            raise ValueError(f"replace_shards needs {len(self._shards)} shards, got {len(shards)}")
        return Dataset(shards, self._ops)

    def iter_shard(self, ctx: WorkerContext) -> Iterator[Any]:
        """Run shard ``ctx.shard_index`` in this process and yield its records."""
        streams = self._shard_streams([ctx])
        try:
            for _ctx, records in streams:
                yield from records
        finally:
            streams.close()

    def run_shards(self, ctxs: Sequence[WorkerContext],
                   consume: Callable[[WorkerContext, Iterator[Any]], T]) -> Iterator[T]:
        """Run several shards one after another in this process; yield ``consume(ctx, records)`` of each.

        ``consume`` runs in this thread under the shard's worker context and should take the
        records to their end. Unlike calling :meth:`iter_shard` per shard, the background stages
        (one thread per ``prefetch``) carry on across shard boundaries: the next shard is read
        and transformed while this one's last records are consumed and committed, so a sequence
        of shards costs the pipeline's fill and drain once, not once per shard.

        An error in a shard's pipeline is raised from its ``records`` (so from ``consume``); the
        generator then ends, as it does when ``consume`` raises, stopping the background threads.
        """
        streams = self._shard_streams(ctxs)
        try:
            for ctx, records in streams:
                with worker_context(ctx):
                    result = consume(ctx, records)
                yield result
        finally:
            streams.close()

    def _shard_streams(self, ctxs: Sequence[WorkerContext]) -> Iterator[tuple[WorkerContext, Iterator[Any]]]:
        """``(ctx, records)`` for each shard in order, the steps before each ``prefetch`` on a
        stage thread shared by all the shards; closing the generator stops the threads."""
        segments: list[list[_Op]] = [[]]
        sizes: list[int] = []
        for op in self._ops:
            if isinstance(op, _Prefetch):
                sizes.append(op.size)
                segments.append([])
            else:
                segments[-1].append(op)
        if not sizes:
            for ctx in ctxs:
                yield ctx, _apply(segments[0], self._shards[ctx.shard_index].records(ctx))
            return
        by_index = {ctx.shard_index: ctx for ctx in ctxs}
        streams = staged_shards(functools.partial(_source_shards, self, ctxs),
                                [functools.partial(_apply, ops) for ops in segments], sizes, by_index)
        try:
            for shard, records in streams:
                yield by_index[shard], records
        finally:
            streams.close()

    def write(
        self,
        sink: Sink,
        *,
        client: DistributedClient | None = None,
        max_parallel: int | None = None,
        env: dict[str, str] | None = None,
        in_process: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> RunResult:
        """Run every shard not yet committed to ``sink``, then write the sink's index.

        Args:
            sink: where records go (``zephyr.writers``); committed shards are skipped.
            client: the fray client to run shards on (default: a ``fray.LocalClient``).
            max_parallel: most shards running at once (default: ``os.cpu_count()``).
            env: environment variables for the workers.
            in_process: run the shards one after another in this process (for inputs so small
                that starting workers would cost more than the work); commits stay per shard.
            progress: called with ``(shards done, shards in all)`` at the start and as shards
                finish (each shard in this process; each worker's group of shards on a client).
        """
        from zephyr.execution import run

        return run(self, sink, client=client, max_parallel=max_parallel, env=env, in_process=in_process,
                   progress=progress)

    def collect(
        self,
        *,
        client: DistributedClient | None = None,
        max_parallel: int | None = None,
    ) -> list[Any]:
        """Run every shard and return all records, shard after shard."""
        from zephyr.execution import run
        from zephyr.writers import CollectSink

        result = run(self, CollectSink(), client=client, max_parallel=max_parallel)
        return [record for shard in result.shard_records for record in shard["records"]]
