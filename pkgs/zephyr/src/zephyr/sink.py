"""The sink interface (where a run's shards go) and :class:`CollectSink`, which returns them.

File sinks and their commit protocol: :mod:`zephyr.file_sink`; the formats: :mod:`zephyr.writers`.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from zephyr.worker_context import Counters, WorkerContext

__all__ = ["CollectSink", "Sink", "shard_name"]


def shard_name(index: int, extension: str) -> str:
    """The file name of shard ``index``: ``part-00000.<extension>``."""
    return f"part-{index:05d}.{extension}"


class Sink(abc.ABC):
    """Where a run's shards go; implementations must pickle (they travel to the workers)."""

    output_path: str | None

    def prepare(self, num_shards: int) -> None:
        """Driver, before any shard runs: clear what a killed earlier run may have left."""
        return None

    def committed(self, shard_index: int, num_shards: int, inputs: list[str]) -> dict[str, Any] | None:
        """Driver: the commit record of a shard already written from ``inputs``, else None."""
        return None

    @abc.abstractmethod
    def write_shard(self, ctx: WorkerContext, records: Iterator[Any], inputs: list[str]) -> dict[str, Any]:
        """Worker: consume ``records``, commit the shard, return its commit record."""

    def finalize(self, shard_records: list[dict[str, Any]], counters: Counters) -> dict[str, Any] | None:
        """Driver, after every shard: write and return the index (None when there is none)."""
        return None


@dataclass(frozen=True)
class CollectSink(Sink):
    """Returns each shard's records to the driver instead of writing them (small results only)."""

    output_path: str | None = None

    def write_shard(self, ctx: WorkerContext, records: Iterator[Any], inputs: list[str]) -> dict[str, Any]:
        items = list(records)
        return {"shard": ctx.shard_index, "records": items, "counters": dict(ctx.counters)}

