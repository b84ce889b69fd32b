"""The one place dedup groups records by key (its shuffle), so it can move to a distributed engine.

A :data:`GroupBy` takes records, a key function and a reducer, and yields what the reducer yields
for every group. Results must not depend on the order groups are visited or on how records were
partitioned: :func:`group_in_process` visits keys in sorted order and keeps each group's records in
arrival order, and the dedup reducers sort what they need. The same shape is zephyr's
``Dataset.group_by(key, reducer, num_partitions=...)``; switching to it means changing
:func:`default_group_by` (the default of every dedup function) or passing another ``GroupBy``
(module-level key and reducer functions are used so they can be shipped to workers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

__all__ = ["GroupBy", "default_group_by", "group_in_process"]

R = TypeVar("R")

GroupBy = Callable[[Iterable[Any], Callable[[Any], Any], Callable[[Any, list[Any]], Iterable[Any]]], Iterator[Any]]
"""``group_by(records, key, reducer)``: ``reducer(key, records_with_that_key)`` for every key."""


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
    """The grouping every dedup step uses: in this process today (the one place to switch)."""
    return group_in_process(records, key, reducer)
