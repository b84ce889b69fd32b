"""Looking things up in an object store side by side: a plan's listings of folders, and lookups in parallel.

Below :mod:`marin.execution.store.store` and :mod:`marin.execution.store.done_index`, which both
read through it (each lookup is a round trip on an object store; :mod:`rigging.store_requests`
bounds and retries each one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from rigging import filesystem as fs

__all__ = ["FolderListings", "in_parallel"]

T = TypeVar("T")
R = TypeVar("R")

_PARALLEL_LOOKUPS = 32


def in_parallel(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[fn(x) for x in items]``, side by side in threads when there are several: each is a
    round trip on an object store."""
    if len(items) <= 1:
        return [fn(x) for x in items]
    # Not at import: a local no-op never looks anything up in parallel.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(_PARALLEL_LOOKUPS, len(items))) as pool:
        return list(pool.map(fn, items))


class FolderListings:
    """Names in folders of a store, each folder listed once: a plan's view of the store, so that
    asking about a thousand outputs of one folder costs one listing (a page per 1,000 names)."""

    def __init__(self) -> None:
        self._names: dict[str, frozenset[str]] = {}

    def fetch(self, folders: Iterable[str]) -> None:
        """List the ``folders`` not listed yet, side by side."""
        wanted = sorted(set(folders) - set(self._names))
        for folder, names in zip(wanted, in_parallel(fs.listdir, wanted), strict=True):
            self._names[folder] = frozenset(names)

    def names(self, folder: str) -> frozenset[str]:
        """The names directly in ``folder`` (listed now if not yet)."""
        self.fetch([folder])
        return self._names[folder]

    def has(self, path: str) -> bool:
        """True when ``path`` was in its folder's listing."""
        folder, _, base = path.rstrip("/").rpartition("/")
        return base in self.names(folder)
