"""The step store: output folders under a prefix, and what planning reads of them in bulk."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from marin.execution.core.step import output_name_of
from marin.execution.store.layout import META_DIR
from marin.execution.store.provenance_record import Provenance
from marin.execution.store.step_record import StepRecord
from marin.execution.store.success_record import SuccessRecord
from rigging import filesystem as fs

__all__ = ['R', 'T', 'FolderListings', 'StepStore', 'finished_builds', 'in_parallel', 'parent_folder']


T = TypeVar("T")


R = TypeVar("R")


def parent_folder(prefix: str, name: str) -> str:
    """The folder under ``prefix`` that holds the outputs of the step ``name`` (every hash of it)."""
    parent = name.rpartition("/")[0]
    return fs.join(prefix, parent) if parent else prefix


def finished_builds(prefix: str, name: str, *, exclude: str = "",
                    listing: Iterable[str] | None = None) -> list[tuple[str, SuccessRecord]]:
    """Finished builds of the step ``name`` (any hash) under ``prefix``: (output path, success record).

    Args:
        exclude: an output path to leave out (not looked at).
        listing: the names in the step's parent folder (:func:`parent_folder`), when the caller
            has just listed it.
    """
    base = name.rpartition("/")[2]
    folder = parent_folder(prefix, name)
    found = []
    for entry in listing if listing is not None else fs.listdir(folder):
        stem, dash, digest = entry.rpartition("-")
        if not dash or stem != base or len(digest) != 16 or fs.join(folder, entry) == exclude:
            continue
        record = StepRecord(fs.join(folder, entry))
        success = record.read_success()
        if success is not None:
            found.append((record.output_path, success))
    return found


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


class StepStore:
    """Maps steps to folders under a prefix (local path, ``gs://`` or ``memory://``)."""

    def __init__(self, prefix: str):
        if not prefix:
            raise ValueError("prefix must be a non-empty path or URL")
        if fs.is_local(prefix):
            prefix = os.path.abspath(fs.strip_protocol(prefix))
        self.prefix = prefix.rstrip("/") if prefix != "/" else prefix

    def output_path(self, output_name: str) -> str:
        """The output folder ``<prefix>/<output name>`` (``<name>-<hash16>``, :func:`output_name_of`)."""
        return fs.join(self.prefix, output_name)

    def output_path_of(self, name: str, digest: str) -> str:
        """The output folder of the step ``name`` with hash ``digest``: ``<prefix>/<name>-<hash16>``."""
        return self.output_path(output_name_of(name, digest))

    def record(self, output_name: str) -> StepRecord:
        """The records of the output ``output_name`` (``<name>-<hash16>``)."""
        return StepRecord(self.output_path(output_name))

    def parent_folder(self, name: str) -> str:
        """The folder holding the outputs of the step ``name`` (every hash of it)."""
        return parent_folder(self.prefix, name)

    @property
    def index_folder(self) -> str:
        """The folder of the done index (:mod:`marin.execution.store.done_index`)."""
        from marin.execution.store.done_index import index_folder  # it reads this module's listings

        return index_folder(self.prefix)

    def path(self, *parts: str) -> str:
        """A path under the prefix that is no step's output (``reports/latest.html``)."""
        return fs.join(self.prefix, *parts)

    def finished_builds(self, name: str, listing: Iterable[str] | None = None) -> list[tuple[str, SuccessRecord]]:
        """Finished builds of the step ``name`` (any hash): (output path, success record); see
        :func:`finished_builds`."""
        return finished_builds(self.prefix, name, listing=listing)

    def resolve(self, ref: str) -> str | None:
        """The output folder a user means by ``ref``, or None: an output folder itself (a path
        holding ``.marin/``), an output name under the prefix (``checkpoints/x-<hash16>``, as
        ``marin run`` prints it), or a step name (its newest finished build)."""
        found = self.resolve_all(ref)
        return found[0][0] if found else None

    def resolve_all(self, ref: str) -> list[tuple[str, Provenance | None]]:
        """Every output folder ``ref`` may mean, the one :meth:`resolve` picks first, with its
        provenance: an output folder or name is one (its provenance not read here); a step name
        means each of its finished builds, newest first (:meth:`earlier_builds`)."""
        ref = ref.rstrip("/")
        for candidate in (ref, self.output_path(ref)):
            if fs.exists(fs.join(candidate, META_DIR)):
                return [(candidate, None)]
        return list(self.earlier_builds(ref))

    def earlier_builds(self, name: str, listing: Iterable[str] | None = None) -> list[tuple[str, Provenance]]:
        """Successful builds of the step ``name`` (any hash): (output path, provenance), newest first.

        ``listing``: the names in its parent folder, as for :func:`finished_builds`.
        """
        found = []
        for output_path, success in self.finished_builds(name, listing):
            record = StepRecord(output_path)
            provenance = record.read_provenance() or Provenance()
            # A damaged record of an old build must not stop every later plan of this name.
            when = success.finished_at if success.finished_at is not None else 0.0
            found.append((record.output_path, provenance, when))
        found.sort(key=lambda row: row[2], reverse=True)
        return [(path, prov) for path, prov, _ in found]
