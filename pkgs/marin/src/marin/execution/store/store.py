"""The step store: output folders under a prefix, and what planning reads of them in bulk."""

from __future__ import annotations

import os
from collections.abc import Iterable

from marin.execution.core.step import output_name_of
from marin.execution.store.layout import META_DIR, index_folder
from marin.execution.store.provenance_record import Provenance
from marin.execution.store.step_record import StepRecord
from marin.execution.store.success_record import SuccessRecord
from rigging import filesystem as fs

__all__ = ['StepStore', 'finished_builds', 'parent_folder']


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
