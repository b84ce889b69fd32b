"""Union-find over document indices whose root is always the smallest member.

Documents are numbered by the total order of the corpus (shard, then position); joining two sets
makes the smaller root the root of both, so every cluster's root is its first document and the
result does not depend on the order edges arrive in. ``find`` halves paths iteratively: no
recursion, and every call ends because each step moves to a strictly smaller index.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["UnionFind"]


class UnionFind:
    """Disjoint sets over ``0 .. size - 1``; the root of a set is its smallest element."""

    def __init__(self, size: int):
        if size < 0:
            raise ValueError(f"size must be >= 0, got {size}")
        self._parent = list(range(size))

    def __len__(self) -> int:
        return len(self._parent)

    def find(self, item: int) -> int:
        """The smallest element of ``item``'s set."""
        parent = self._parent
        while parent[item] != item:
            # Parents are always smaller than their children, so this walk strictly decreases.
            parent[item] = parent[parent[item]]
            item = parent[item]
        return item

    def union(self, a: int, b: int) -> bool:
        """Join the sets of ``a`` and ``b``; True if they were apart."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        if ra < rb:
            self._parent[rb] = ra
        else:
            self._parent[ra] = rb
        return True

    def union_all(self, edges: Iterable[tuple[int, int]]) -> int:
        """Join every edge; returns how many joined two sets that were apart."""
        return sum(self.union(a, b) for a, b in edges)

    def roots(self) -> list[int]:
        """The root of every element, in element order."""
        return [self.find(i) for i in range(len(self._parent))]
