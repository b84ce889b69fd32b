"""The one place dedup groups records by key (its shuffle): in this process, or through zephyr's.

A :data:`GroupBy` takes records, a key function and a reducer, and yields what the reducer yields
for every group. Results must not depend on the order groups are visited or on how records were
partitioned: the dedup reducers sort what they need, and read a group once, in order (so an
iterator serves as well as a list). Keys and records are JSON values (tuples may come back as
lists), and key and reducer functions are module-level, so they can be shipped to workers.

Two implementations:

* :func:`group_in_process`: a dict in this process's memory; keys are visited in sorted order.
* :class:`ZephyrGroupBy`: zephyr's ``Dataset.group_by`` (hash partitions written as files under
  ``<work_path>/.shuffle/<reducer name>/``, then reduced), in this process
  (:attr:`Grouping.ZEPHYR`) or on local worker processes (:attr:`Grouping.ZEPHYR_WORKERS`).

Which one a dedup step uses is its config's :class:`Grouping` (not part of the step's hash: both
give the same attributes, tested). :func:`default_group_by` is the in-process one: on one machine
it is faster (``benchmarks/bench_datakit.py`` measures both), and every dedup step holds its
corpus's shingle sets or keys in memory anyway, so files buy no memory back.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from rigging import filesystem as fs
from zephyr import Dataset
from zephyr.execution import run
from zephyr.shuffle import WORK_FOLDER
from zephyr.writers import CollectSink

__all__ = ["GroupBy", "Grouping", "ZephyrGroupBy", "default_group_by", "group_in_process",
           "step_group_by"]

R = TypeVar("R")


GroupBy = Callable[[Iterable[Any], Callable[[Any], Any], Callable[[Any, Iterable[Any]], Iterable[Any]]], Iterator[Any]]
"""``group_by(records, key, reducer)``: ``reducer(key, records_with_that_key)`` for every key."""


class Grouping(enum.Enum):
    """Where a dedup step groups its records."""

    IN_PROCESS = "in_process"
    """A dict in the step's process (:func:`group_in_process`)."""
    ZEPHYR = "zephyr"
    """Zephyr's shuffle, its files under the step's output folder (:class:`ZephyrGroupBy`), every
    task in the step's process."""
    ZEPHYR_WORKERS = "zephyr_workers"
    """Zephyr's shuffle as :attr:`ZEPHYR`, its map and reduce tasks on local worker processes
    (fray's ``LocalClient``, one per CPU at most)."""


def group_in_process(records: Iterable[Any], key: Callable[[Any], Any],
                     reducer: Callable[[Any, list[Any]], Iterable[R]]) -> Iterator[R]:
    """Group in this process's memory; keys are visited in sorted order."""
    groups: dict[Any, list[Any]] = {}
    for record in records:
        k = key(record)
        group = groups.get(k)
        if group is None:
            groups[k] = [record]
        else:
            group.append(record)
    for k in sorted(groups):
        yield from reducer(k, groups.pop(k))


def default_group_by(records: Iterable[Any], key: Callable[[Any], Any],
                     reducer: Callable[[Any, list[Any]], Iterable[R]]) -> Iterator[R]:
    """The grouping of the dedup functions when none is given: :func:`group_in_process`."""
    return group_in_process(records, key, reducer)


@dataclass(frozen=True)
class ZephyrGroupBy:
    """A :data:`GroupBy` through zephyr's ``Dataset.group_by``.

    The records are cut into ``map_tasks`` contiguous in-memory shards; each stage's files go to
    ``<work_path>/.shuffle/<reducer's name>/`` (so the reducers of one work folder must have
    distinct names, as the dedup reducers do).

    Attributes:
        work_path: the folder the shuffle files go under (a step's output folder).
        map_tasks: input shards (map tasks).
        num_partitions: hash partitions (reduce tasks).
        in_process: run every task in this process (else on a local fray client's workers).
        max_parallel: most tasks at once on workers (None: one per CPU).
    """

    work_path: str
    map_tasks: int = 2
    num_partitions: int = 2
    in_process: bool = True
    max_parallel: int | None = None

    def __post_init__(self) -> None:
        if self.map_tasks < 1:
            raise ValueError(f"map_tasks must be >= 1, got {self.map_tasks}")
        if self.num_partitions < 1:
            raise ValueError(f"num_partitions must be >= 1, got {self.num_partitions}")

    def __call__(self, records: Iterable[Any], key: Callable[[Any], Any],
                 reducer: Callable[[Any, Iterable[Any]], Iterable[R]]) -> Iterator[R]:
        items = list(records)
        n = len(items)
        shards = [items[i * n // self.map_tasks:(i + 1) * n // self.map_tasks] for i in range(self.map_tasks)]
        dataset = Dataset.from_items(shards).group_by(
            key, reducer, num_partitions=self.num_partitions, work_path=self.work_path,
            name=getattr(reducer, "__name__", "group_by").strip("_"))
        result = run(dataset, CollectSink(), in_process=self.in_process, max_parallel=self.max_parallel)
        return itertools.chain.from_iterable(shard["records"] for shard in result.shard_records)


@contextlib.contextmanager
def step_group_by(grouping: Grouping, output_path: str) -> Iterator[GroupBy]:
    """The :data:`GroupBy` of ``grouping`` for a step writing to ``output_path``.

    Zephyr's shuffle files go under ``<output_path>/.shuffle/`` (a retry of the step reuses the map
    tasks that committed) and are removed once the step's body returns: they are work, not output.
    """
    if grouping is Grouping.IN_PROCESS:
        yield default_group_by
        return
    yield ZephyrGroupBy(output_path, in_process=grouping is Grouping.ZEPHYR)
    work = fs.join(output_path, WORK_FOLDER)
    if fs.exists(work):
        fs.rm_tree(work)
