"""What a worker knows about the shard it runs: its index, the shard count, output and counters.

Code running inside a pipeline (a ``map`` function, a reader, a writer) reaches the context of
the shard being processed with :func:`current_context`; counters it increments come back to the
driver, summed over all shards, in the run's result.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

__all__ = ["Counters", "WorkerContext", "current_context", "worker_context"]


class Counters(dict[str, int]):
    """Named integer counters; summing two adds them key by key."""

    def increment(self, name: str, amount: int = 1) -> None:
        """Add ``amount`` to counter ``name`` (created at zero)."""
        self[name] = self.get(name, 0) + int(amount)

    def merge(self, other: Mapping[str, int]) -> None:
        """Add every counter of ``other`` into this one."""
        for name, amount in other.items():
            self.increment(name, amount)

    @classmethod
    def total(cls, parts: Iterable[Mapping[str, int]]) -> Counters:
        """The key-by-key sum of ``parts``, with keys in sorted order (stable when serialised)."""
        out = cls()
        for part in parts:
            out.merge(part)
        return cls(sorted(out.items()))


@dataclass
class WorkerContext:
    """The shard a worker is processing.

    Attributes:
        shard_index: index of this shard, ``0 <= shard_index < num_shards``.
        num_shards: how many shards the whole pipeline has.
        output_path: the folder the pipeline writes into (None when it only collects).
        counters: counters for this shard; summed over shards by the driver.
    """

    shard_index: int
    num_shards: int
    output_path: str | None = None
    counters: Counters = field(default_factory=Counters)

    def __post_init__(self) -> None:
        if self.num_shards <= 0:
            raise ValueError(f"num_shards must be > 0, got {self.num_shards}")
        if not 0 <= self.shard_index < self.num_shards:
            raise ValueError(f"shard_index must be in [0, {self.num_shards}), got {self.shard_index}")

    def increment(self, name: str, amount: int = 1) -> None:
        """Add ``amount`` to this shard's counter ``name``."""
        self.counters.increment(name, amount)


_CURRENT: contextvars.ContextVar[WorkerContext | None] = contextvars.ContextVar("zephyr_worker", default=None)


def current_context() -> WorkerContext:
    """The context of the shard being processed; raises outside of a running shard."""
    ctx = _CURRENT.get()
    if ctx is None:
        raise RuntimeError("no zephyr shard is running here: current_context() works only inside a pipeline")
    return ctx


@contextlib.contextmanager
def worker_context(ctx: WorkerContext) -> Iterator[WorkerContext]:
    """Make ``ctx`` the current context for the duration of the ``with`` block."""
    token = _CURRENT.set(ctx)
    try:
        yield ctx
    finally:
        _CURRENT.reset(token)
