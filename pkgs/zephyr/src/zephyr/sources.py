"""Where a dataset's shards come from: files (or byte ranges of them) and in-memory items.

A :class:`ShardSource` yields one shard's records and describes its inputs; the description is
stored in commit records so that a shard made from other inputs is not taken for a committed one.
"""

from __future__ import annotations

import abc
import hashlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rigging import filesystem as fs
from zephyr.readers import FileSlice, Reader
from zephyr.worker_context import WorkerContext

__all__ = ["FileShard", "ItemShard", "ShardSource", "plan_file_shards"]


class ShardSource(abc.ABC):
    """Where one shard's records come from."""

    @abc.abstractmethod
    def records(self, ctx: WorkerContext) -> Iterator[Any]:
        """Yield the shard's source records."""

    @abc.abstractmethod
    def describe(self) -> list[str]:
        """A stable description of the inputs (stored in commit records to detect stale shards)."""

    def paths(self) -> list[str]:
        """The files the shard reads (the driver runs shards in process when one is ``memory://``)."""
        return []


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

    def paths(self) -> list[str]:
        return [piece.path for _reader, piece in self.pieces]


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
