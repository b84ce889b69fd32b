"""Hash-partitioned grouping: a shuffle in two waves of tasks, deterministic and resumable.

API (methods of :class:`~zephyr.dataset.Dataset`, lazy like the others)::

    ds.group_by(key, reducer, num_partitions=None, sort_within=None, work_path=None, name="group_by")
    ds.deduplicate(key, sort_within=None, ...)   # the first record of each key
    ds.count_by(key, ...)                        # {"key": k, "count": n} for each key

``key(record)`` is a JSON value (:mod:`zephyr.keys`); ``reducer(key, records)`` returns an
iterable of outputs for one group, ``records`` an iterator read once. The result is a dataset of
``num_partitions`` shards (default: as many as the input has) holding the reducer's outputs; it
chains into ``map``/``write``/``collect``/another ``group_by``. Records and keys travel through
files as JSON, so they must be JSON values and come back as JSON gives them (tuples as lists).

How it runs. The map wave has one task per input shard: it computes each record's key and sends
the record to partition ``stable_hash(key) % num_partitions``. The reduce wave, which starts once
every map task has committed, has one task per partition: it reads its partition from every map
output, groups equal keys and calls the reducer; the pipeline's later steps and the sink run in
the same task. Files, under ``<work>/.shuffle/<name>/``::

    part-00003.shuffle            map task 3's output: one zstd frame per partition, in order
    .commits/part-00003.json      its commit record, with each partition's offset, length, count
    index.json                    written once every map task has committed

Each frame holds lines ``<key json>\\t<record json>\\n`` sorted by key bytes (stably, so a key's
records keep their order in the shard). ``<work>`` is ``work_path``, or else the folder of the sink
the pipeline is written to (``collect()`` needs ``work_path``).

Determinism: the bytes of every file depend only on the input and the functions, never on worker
count, the order tasks finish in, ``PYTHONHASHSEED`` or the client (local or Ray). A reducer sees
a group's records in input order (map task index, then position in its shard), or sorted by
``sort_within(record)`` with ties in input order; groups come out of a partition in the byte order
of their keys' canonical JSON.

Resume: map tasks commit as the file sinks' shards do (:mod:`zephyr.file_sink`), so a rerun redoes
only the map tasks without a commit record (what a killed task left is replaced, never read), and
reduce tasks are the shards of the run's sink, committed by it. A map output is reused when its
shard's inputs, the key function's name and the partition count are those it was made with: a
changed function body is not noticed (as with any zephyr sink), so give changed code a fresh
output folder. Memory: a map task holds its shard's encoded records until it writes them; a
reduce task holds its partition (its share of every map output).
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import xxhash
import zstandard

from rigging import filesystem as fs
from zephyr.errors import DataError
from zephyr.file_sink import FileSink, OpenFile
from zephyr.keys import encode_json
from zephyr.sources import ShardSource
from zephyr.worker_context import WorkerContext

if TYPE_CHECKING:
    from zephyr.dataset import Dataset

__all__ = [
    "SHUFFLE_FORMAT",
    "WORK_FOLDER",
    "GroupBy",
    "KeyFn",
    "PartitionSink",
    "PendingPartition",
    "ReducePartition",
    "Reducer",
    "callable_label",
    "count_records",
    "identity",
    "keep_first",
    "key_only",
]

KeyFn = Callable[[Any], Any]
"""Gives a record's grouping key (a JSON value)."""
Reducer = Callable[[Any, Iterator[Any]], Iterable[Any]]
"""Turns one group, ``(key, records)``, into outputs."""

SHUFFLE_FORMAT = "zephyr.shuffle/v1"
_EXTENSION = "shuffle"
WORK_FOLDER = ".shuffle"
"""The folder under a stage's work path that holds its stages' files (``<work>/.shuffle/<name>/``)."""
# zstd level 3 (its default): JSON lines of words came out 3x smaller (benchmarks/bench_shuffle.py).
_ZSTD_LEVEL = 3


def callable_label(fn: Callable[..., Any]) -> str:
    """A name for ``fn`` that is the same in every run (for commit records, never for hashing)."""
    if isinstance(fn, functools.partial):
        label = f"partial({callable_label(fn.func)}, {fn.args!r}, {sorted(fn.keywords.items())!r})"
    elif hasattr(fn, "__qualname__"):
        label = f"{getattr(fn, '__module__', None)}.{fn.__qualname__}"
    else:
        label = repr(fn)  # operator.itemgetter('id') and friends say what they do
    # A repr holding an address would differ in every run and so never match a committed task.
    return f"{type(fn).__module__}.{type(fn).__qualname__}" if " at 0x" in label else label


@dataclass(frozen=True, eq=False)
class GroupBy:
    """One group_by stage of a pipeline (see the module docstring for the meaning of each field).

    Attributes:
        upstream: the dataset whose records are grouped.
        key: gives each record's key.
        reducer: turns each group into outputs.
        num_partitions: how many partitions (reduce tasks, output shards).
        sort_within: orders the records of a group (None: input order).
        work_path: the folder for the stage's files (None: the sink's folder).
        name: the stage's folder name under ``<work>/.shuffle/``.
        key_label: the key function's name in commit records (default: from ``key``).
    """

    upstream: Dataset
    key: KeyFn
    reducer: Reducer
    num_partitions: int
    sort_within: Callable[[Any], Any] | None = None
    work_path: str | None = None
    name: str = "group_by"
    key_label: str = ""

    def __post_init__(self) -> None:
        if self.num_partitions <= 0:
            raise ValueError(f"num_partitions must be > 0, got {self.num_partitions}")
        if not self.name or "/" in self.name or self.name.startswith((".", "_")):
            raise ValueError(f"a group_by name must be a plain folder name, got {self.name!r}")
        if self.work_path is not None and not self.work_path:
            raise ValueError("work_path must be a non-empty path or None, got ''")
        if not self.key_label:
            object.__setattr__(self, "key_label", callable_label(self.key))

    def pending(self) -> list[PendingPartition]:
        """The output shards before the stage has run: one per partition."""
        return [PendingPartition(self, j) for j in range(self.num_partitions)]

    def folder(self, default_work: str | None) -> str:
        """Where the stage's files go, given the folder of the sink the pipeline writes to."""
        work = self.work_path or default_work
        if work is None:
            raise ValueError(f"group_by stage {self.name!r} needs a work_path: the pipeline writes to no folder "
                             "(collect()), so pass work_path= for its partition files")
        return fs.join(work, WORK_FOLDER, self.name)

    def sink(self, folder: str) -> PartitionSink:
        """The sink of the map wave: each upstream shard to one partitioned file in ``folder``."""
        return PartitionSink(folder, self.key, self.num_partitions, self.key_label)

    def reduce_partitions(self, folder: str, map_records: Sequence[Mapping[str, Any]]) -> list[ReducePartition]:
        """The output shards once every map task has committed (``map_records`` in map task order)."""
        segments: list[list[_Segment]] = [[] for _ in range(self.num_partitions)]
        for record in map_records:
            info = record["files"][""]
            path = fs.join(folder, info["path"])
            for j, (start, length, count) in enumerate(info["partitions"]):
                if length:
                    segments[j].append(_Segment(path, start, length, count, info["sha256"]))
        return [ReducePartition(folder, j, self.num_partitions, tuple(segments[j]), self.reducer, self.sort_within)
                for j in range(self.num_partitions)]


@dataclass(frozen=True)
class PendingPartition(ShardSource):
    """Partition ``partition`` of ``stage`` before the stage has run; the driver replaces it."""

    stage: GroupBy
    partition: int

    def _unavailable(self) -> RuntimeError:
        return RuntimeError(f"partition {self.partition} of group_by stage {self.stage.name!r} exists only while "
                            "the pipeline runs (write() or collect()), it cannot be read on its own")

    def records(self, ctx: WorkerContext) -> Iterator[Any]:
        raise self._unavailable()

    def describe(self) -> list[str]:
        raise self._unavailable()


class _PartitionFile(OpenFile):
    """A map task's output: records buffered per partition, written sorted by key on close."""

    def __init__(self, path: str, key: KeyFn, num_partitions: int):
        self._path = path
        self._key = key
        self._parts: list[list[tuple[bytes, bytes]]] = [[] for _ in range(num_partitions)]

    def write(self, record: Any) -> int:
        key = encode_json(self._key(record), "group_by key")
        self._parts[xxhash.xxh3_64_intdigest(key) % len(self._parts)].append((key, encode_json(record, "record")))
        return 0

    def close(self) -> dict[str, Any]:
        compressor = zstandard.ZstdCompressor(level=_ZSTD_LEVEL, write_checksum=True)
        partitions = []
        offset = 0
        with open(self._path, "wb") as f:
            for rows in self._parts:
                if not rows:
                    partitions.append([offset, 0, 0])
                    continue
                rows.sort(key=itemgetter(0))  # stable: a key's records keep their order
                frame = compressor.compress(b"".join(k + b"\t" + v + b"\n" for k, v in rows))
                f.write(frame)
                partitions.append([offset, len(frame), len(rows)])
                offset += len(frame)
        self._parts = []
        return {"partitions": partitions}

    def discard(self) -> None:
        self._parts = []


@dataclass(frozen=True)
class PartitionSink(FileSink):
    """The map wave's sink: each shard's records to one file of sorted, compressed partitions.

    Attributes:
        output_path: the stage folder.
        key: gives each record's key.
        num_partitions: how many partitions each file holds.
        key_label: the key function's name, stored with the inputs in each commit record.
    """

    output_path: str
    key: KeyFn
    num_partitions: int
    key_label: str
    splits: tuple[str, ...] = field(default=(), init=False)
    metadata: Mapping[str, Any] = field(default_factory=dict, init=False)
    format_name: str = field(default=SHUFFLE_FORMAT, init=False)
    extension: str = field(default=_EXTENSION, init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metadata", {"num_partitions": self.num_partitions})
        self._validate()

    def _open(self, local_path: str) -> OpenFile:
        return _PartitionFile(local_path, self.key, self.num_partitions)

    def _inputs(self, inputs: list[str]) -> list[str]:
        return [f"group_by key={self.key_label} partitions={self.num_partitions}", *inputs]

    def committed(self, shard_index: int, num_shards: int, inputs: list[str]) -> dict[str, Any] | None:
        record = super().committed(shard_index, num_shards, self._inputs(inputs))
        if record is None:
            return None
        info = record["files"][""]
        partitions = info.get("partitions")
        # The reduce tasks read by these offsets: a record whose offsets do not tile the file
        # exactly is damaged, and the task is redone.
        if not isinstance(partitions, list) or len(partitions) != self.num_partitions:
            return None
        offset = 0
        for entry in partitions:
            if (not isinstance(entry, list) or len(entry) != 3 or any(type(n) is not int or n < 0 for n in entry)
                    or entry[0] != offset):
                return None
            offset += entry[1]
        return record if offset == info["bytes"] else None

    def write_shard(self, ctx: WorkerContext, records: Iterator[Any], inputs: list[str]) -> dict[str, Any]:
        return super().write_shard(ctx, records, self._inputs(inputs))


@dataclass(frozen=True)
class _Segment:
    """One map task's share of a partition: bytes ``[start, start + length)`` of its file."""

    path: str
    start: int
    length: int
    records: int
    sha256: str  # of the whole map output, so that the reduce task's inputs name its content


def _read_range(path: str, start: int, length: int) -> bytes:
    try:
        if fs.is_local(path):
            with open(fs.strip_protocol(path), "rb") as f:
                f.seek(start)
                data = f.read(length)
        else:
            # One ranged read (fsspec takes the URL with its protocol).
            data = fs.filesystem(path).cat_file(path, start=start, end=start + length)
    except FileNotFoundError:
        raise DataError(path, "", "shuffle map output is missing (deleted after its task committed?)") from None
    if len(data) != length:
        raise DataError(path, f"bytes {start}-{start + length}", f"shuffle map output is cut short ({len(data)} bytes)")
    return data


def _segment_rows(segment: _Segment) -> Iterator[tuple[bytes, bytes]]:
    """``(key json, record json)`` of each line of a segment, in file order (sorted by key)."""
    where = f"bytes {segment.start}-{segment.start + segment.length}"
    data = _read_range(segment.path, segment.start, segment.length)
    try:
        text = zstandard.ZstdDecompressor().decompress(data)
    except zstandard.ZstdError as e:
        raise DataError(segment.path, where, f"damaged shuffle partition: {e}") from None
    lines = text.split(b"\n")
    lines.pop()  # after the last newline
    if len(lines) != segment.records:
        raise DataError(segment.path, where, f"partition holds {len(lines)} records, its commit record says "
                                             f"{segment.records}")
    for line in lines:
        key, _tab, value = line.partition(b"\t")
        yield key, value


@dataclass(frozen=True)
class ReducePartition(ShardSource):
    """One partition of a stage that has run: its groups, each turned into outputs by the reducer.

    Attributes:
        folder: the stage folder (named in descriptions).
        partition: this partition's number.
        num_partitions: how many the stage has.
        segments: this partition's share of each map output, in map task order.
        reducer: turns ``(key, records)`` into outputs.
        sort_within: orders a group's records (None: input order).
    """

    folder: str
    partition: int
    num_partitions: int
    segments: tuple[_Segment, ...]
    reducer: Reducer
    sort_within: Callable[[Any], Any] | None

    def records(self, ctx: WorkerContext) -> Iterator[Any]:
        # heapq.merge takes equal keys in the order of its inputs (here map task order), and each
        # segment keeps a key's records in shard order: a group comes out in input order.
        merged = heapq.merge(*(_segment_rows(s) for s in self.segments), key=itemgetter(0))
        for key_bytes, rows in itertools.groupby(merged, key=itemgetter(0)):
            key = json.loads(key_bytes)
            values: Iterator[Any] = (json.loads(value) for _key, value in rows)
            if self.sort_within is not None:
                values = iter(sorted(values, key=self.sort_within))
            outputs = self.reducer(key, values)
            if outputs is None:
                raise TypeError(f"reducer {callable_label(self.reducer)} returned None for key "
                                f"{key_bytes.decode()[:200]}; it must return an iterable of outputs")
            yield from outputs

    def describe(self) -> list[str]:
        # The map outputs' content by checksum: a redone map task with other output makes every
        # reduce task that reads it stale.
        listing = [[s.path, s.start, s.length, s.sha256] for s in self.segments]
        digest = hashlib.sha256(json.dumps(listing).encode("utf-8")).hexdigest()[:16]
        return [f"group_by {self.folder} partition {self.partition} of {self.num_partitions}: "
                f"{len(self.segments)} map outputs sha256:{digest}"]

    def paths(self) -> list[str]:
        # An empty partition still names the stage folder: the driver runs memory:// stages here.
        return [s.path for s in self.segments] or [self.folder]


def key_only(key: KeyFn, record: Any) -> Any:
    """What ``count_by`` shuffles in place of a record: its key (the record itself is not needed)."""
    return key(record)


def identity(value: Any) -> Any:
    """The key of a record that is its own key."""
    return value


def keep_first(key: Any, records: Iterator[Any]) -> list[Any]:
    """Reducer of ``deduplicate``: the group's first record."""
    return [next(records)]


def count_records(key: Any, records: Iterator[Any]) -> list[dict[str, Any]]:
    """Reducer of ``count_by``: ``{"key": key, "count": n}``."""
    return [{"key": key, "count": sum(1 for _ in records)}]
