"""A lazy, sharded dataset: a source cut into shards plus a chain of per-record transforms.

Nothing runs until :meth:`Dataset.write` or :meth:`Dataset.collect`; then every shard runs as
one job on a ``fray`` client (a local process each by default), at most ``max_parallel`` at a
time. Transforms are applied to each shard independently and in order, so functions given to
``map``/``filter``/``flat_map`` must be importable (module-level functions or
``functools.partial`` of them) to reach the worker processes.

>>> ds = Dataset.from_files("corpus/*.jsonl").map(str.lower).filter(bool).take_per_shard(1000)
>>> result = ds.write(JsonlSink("out/"))  # doctest: +SKIP
"""

from __future__ import annotations

import abc
import contextvars
import hashlib
import itertools
import math
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rigging import filesystem as fs
from zephyr.readers import FileSlice, OnError, Reader, TextMode, expand_paths, reader_for_path
from zephyr.worker_context import WorkerContext

if TYPE_CHECKING:
    from fray import DistributedClient
    from zephyr.execution import RunResult
    from zephyr.writers import Sink

__all__ = ["Dataset", "FileShard", "ItemShard", "ShardSource", "plan_file_shards"]


class ShardSource(abc.ABC):
    """Where one shard's records come from."""

    @abc.abstractmethod
    def records(self, ctx: WorkerContext) -> Iterator[Any]:
        """Yield the shard's source records."""

    @abc.abstractmethod
    def describe(self) -> list[str]:
        """A stable description of the inputs (stored in commit records to detect stale shards)."""


@dataclass(frozen=True)
class FileShard(ShardSource):
    """Documents read from files or byte ranges of files, each with its own reader.

    Attributes:
        pieces: ``(reader, slice)`` pairs read in order.
    """

    pieces: tuple[tuple[Reader, FileSlice], ...]

    def records(self, ctx: WorkerContext) -> Iterator[str]:
        for reader, piece in self.pieces:
            yield from reader.read(piece, ctx.counters)

    def describe(self) -> list[str]:
        # The size is there so that a file rewritten in place with other content is not taken
        # for the one a committed shard was made from (a cheap check, not a content hash).
        return [f"{p.path}[{p.start}:{'' if p.end is None else p.end}] size={fs.size(p.path)}"
                for _r, p in self.pieces]


@dataclass(frozen=True)
class ItemShard(ShardSource):
    """Records held in memory (small inputs, tests).

    Attributes:
        items: the records, in order.
    """

    items: tuple[Any, ...]

    def records(self, ctx: WorkerContext) -> Iterator[Any]:
        return iter(self.items)

    def describe(self) -> list[str]:
        # In-memory items have no name; their repr's digest tells one list from another.
        digest = hashlib.sha256(repr(self.items).encode("utf-8")).hexdigest()[:16]
        return [f"<{len(self.items)} items sha256:{digest}>"]


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
class _Prefetch(_Op):
    size: int

    def apply(self, records):
        # Upstream work (reading, and native code that releases the GIL such as a tokenizer's
        # encode_batch) runs in a thread while the consumer handles earlier records.
        buffer: queue.Queue = queue.Queue(self.size)
        stop = threading.Event()

        def put(item: tuple[str, Any]) -> bool:
            while not stop.is_set():
                try:
                    buffer.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def produce() -> None:
            try:
                for record in records:
                    if not put(("item", record)):
                        return
                put(("done", None))
            except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
                put(("error", e))

        # The thread sees the same worker context (shard index, counters) as this one.
        context = contextvars.copy_context()
        thread = threading.Thread(target=context.run, args=(produce,), name="zephyr-prefetch", daemon=True)
        thread.start()
        try:
            while True:
                kind, value = buffer.get()
                if kind == "item":
                    yield value
                elif kind == "done":
                    return
                else:
                    raise value
        finally:
            stop.set()
            thread.join()


def plan_file_shards(files: Sequence[str], readers: Sequence[Reader], num_shards: int | None) -> list[FileShard]:
    """Cut files into shards with a stable plan.

    ``num_shards=None`` gives one shard per file. Fewer shards than files groups neighbouring
    files; more shards than files cuts splittable (uncompressed line-based) files into byte
    ranges of about equal size. Shards that nothing is left for are empty (never an error: the
    output layout keeps ``num_shards`` parts).
    """
    if num_shards is None:
        return [FileShard(((r, FileSlice(f)),)) for f, r in zip(files, readers, strict=True)]
    if num_shards <= 0:
        raise ValueError(f"num_shards must be > 0, got {num_shards}")
    pieces: list[tuple[Reader, FileSlice]]
    if num_shards <= len(files):
        pieces = [(r, FileSlice(f)) for f, r in zip(files, readers, strict=True)]
    else:
        sizes = [fs.size(f) if r.splittable(f) else 0 for f, r in zip(files, readers, strict=True)]
        total = sum(sizes)
        target = max(1, math.ceil(total / num_shards)) if total else 1
        pieces = []
        for f, r, size in zip(files, readers, sizes, strict=True):
            if not r.splittable(f) or size <= target:
                pieces.append((r, FileSlice(f)))
                continue
            parts = math.ceil(size / target)
            bounds = [size * k // parts for k in range(parts + 1)]
            for k in range(parts):
                pieces.append((r, FileSlice(f, bounds[k], None if k == parts - 1 else bounds[k + 1])))
    n = len(pieces)
    return [FileShard(tuple(pieces[i * n // num_shards:(i + 1) * n // num_shards])) for i in range(num_shards)]


class Dataset:
    """A lazy sharded pipeline; every method returns a new dataset and runs nothing."""

    def __init__(self, shards: Sequence[ShardSource], ops: Sequence[_Op] = ()):
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
    ) -> Dataset:
        """Documents of the files in ``source`` (paths, globs, folders), sharded by
        :func:`plan_file_shards`; the reader is chosen per file by extension unless given."""
        files = expand_paths(source)
        readers = [
            reader or reader_for_path(f, text_field=text_field, text_mode=text_mode, on_error=on_error)
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

    def _then(self, op: _Op) -> Dataset:
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

    def iter_shard(self, ctx: WorkerContext) -> Iterator[Any]:
        """Run shard ``ctx.shard_index`` in this process and yield its records."""
        records: Iterator[Any] = self._shards[ctx.shard_index].records(ctx)
        for op in self._ops:
            records = op.apply(records)
        return records

    def write(
        self,
        sink: Sink,
        *,
        client: DistributedClient | None = None,
        max_parallel: int | None = None,
        env: dict[str, str] | None = None,
        in_process: bool = False,
    ) -> RunResult:
        """Run every shard not yet committed to ``sink``, then write the sink's index.

        Args:
            sink: where records go (``zephyr.writers``); committed shards are skipped.
            client: the fray client to run shards on (default: a ``fray.LocalClient``).
            max_parallel: most shards running at once (default: ``os.cpu_count()``).
            env: environment variables for the workers.
            in_process: run the shards one after another in this process (for inputs so small
                that starting workers would cost more than the work); commits stay per shard.
        """
        from zephyr.execution import run

        return run(self, sink, client=client, max_parallel=max_parallel, env=env, in_process=in_process)

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
