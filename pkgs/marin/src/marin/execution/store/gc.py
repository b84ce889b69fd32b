"""Garbage collection: what ``marin gc`` removes, and removing it.

An output is kept when a GC root names it (:mod:`marin.execution.store.roots`; the caller adds
the steps of the files it was given) unless its ``ttl`` has passed; it is never removed while a
live lease holds it, and nothing outside the prefix is ever touched. Besides outputs, a collection
removes what killed or taken-over processes left (:mod:`marin.execution.store.leftovers`).
Finding (:func:`find_garbage`) and removing (:func:`remove_garbage`) are apart, so that a command
can show what would go and ask before anything does.

Runs and collections exclude each other (:mod:`marin.execution.store.run_roots`): removing happens
under the store's collection lease, and what was found is checked again then: an output a root
registered since, that a live run planned, or that a live lease holds now, stays.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from marin.execution.store.done_index import marker_paths
from marin.execution.store.layout import ATTEMPTS_DIR, META_DIR
from marin.execution.store.leftovers import (
    DEAD_RUN_KIND,
    Leftover,
    expired_outputs,
    remove_leftovers,
    store_leftovers,
    temp_leftovers,
)
from marin.execution.store.roots import read_roots
from marin.execution.store.run_roots import collection_lock, dead_run_roots, runs_kept
from marin.execution.store.step_record import StepRecord
from marin.execution.store.store import StepStore
from marin.execution.store.usage import MODEL_FILE_NAMES, marks_a_model
from rigging import filesystem as fs
from rigging.lease import held

__all__ = ["EXPIRED", "UNREACHABLE", "GcEntry", "GcReport", "collect_garbage", "find_garbage", "find_outputs",
           "remove_garbage"]

UNREACHABLE = "no root reaches it"
EXPIRED = "its ttl has passed"


@dataclass(frozen=True)
class GcEntry:
    """An output a collection removes: its name under the prefix, its bytes, why, and whether it
    holds a model (a checkpoint), which is removed only when the user says so."""

    folder: str
    bytes: int
    why: str
    model: bool = False


@dataclass
class GcReport:
    """What a collection removes (or would remove), what it keeps, and the bytes it frees."""

    entries: list[GcEntry] = field(default_factory=list)
    kept_live: list[str] = field(default_factory=list)
    """Outputs no root reaches that a live lease holds: left alone."""
    leftovers: list[Leftover] = field(default_factory=list)
    reachable: int = 0
    """Outputs found that a root (or a given file) reaches and that stay."""
    spared: list[tuple[str, str]] = field(default_factory=list)
    """Outputs found to remove that stayed when removal came (folder, why): a root registered
    since, a live run planned it, a live lease holds it."""
    problems: list[str] = field(default_factory=list)
    """Lines about what was left alone because its records cannot be read."""

    @property
    def removed(self) -> list[str]:
        """The outputs removed (or to remove): those found, less those spared."""
        spared = {folder for folder, _why in self.spared}
        return [e.folder for e in self.entries if e.folder not in spared]

    @property
    def models(self) -> list[GcEntry]:
        return [e for e in self.entries if e.model]

    @property
    def freed_bytes(self) -> int:
        going = set(self.removed)
        return sum(e.bytes for e in self.entries if e.folder in going) + sum(left.bytes for left in self.leftovers)


def _output_sizes(files: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Every step output folder among a listing of the prefix (one with a ``.marin/`` folder;
    an attempt folder's own belongs to its step's), with the bytes of everything under it."""
    files = list(files)
    outputs: set[str] = set()
    marker = f"/{META_DIR}/"
    for rel, _size in files:
        if rel.startswith(META_DIR + "/"):
            continue  # the store's own records: the done index, the roots
        cut = ("/" + rel).find(marker)
        if cut <= 0:
            continue
        folder = rel[:cut - 1].partition(f"/{ATTEMPTS_DIR}/")[0]
        if not folder.startswith(ATTEMPTS_DIR + "/"):
            outputs.add(folder)
    totals = dict.fromkeys(outputs, 0)
    for rel, size in files:
        parts = rel.split("/")
        for owner in ("/".join(parts[:i]) for i in range(1, len(parts))):
            if owner in totals:
                totals[owner] += size
    return totals


def _holding_checkpoints(files: Iterable[tuple[str, int]], outputs: set[str]) -> set[str]:
    """The ``outputs`` whose files (the prefix's listing) hold a checkpoint or final parameters
    (:func:`~marin.execution.store.usage.marks_a_model`): models, from what is there, not from a
    manifest (an unfinished training run has none, a damaged one reads as none)."""
    found = set()
    for rel, _size in files:
        if rel.rpartition("/")[2] not in MODEL_FILE_NAMES:
            continue
        parts = rel.split("/")
        found.update(owner for i in range(1, len(parts))
                     if (owner := "/".join(parts[:i])) in outputs and marks_a_model("/".join(parts[i:])))
    return found


def find_outputs(store: StepStore) -> dict[str, int]:
    """Every step output folder under the prefix with its size in bytes (from a listing)."""
    return _output_sizes(fs.walk_files(store.prefix))


def _inside(prefix: str, path: str) -> bool:
    if not fs.is_local(prefix):
        return path.startswith(prefix.rstrip("/") + "/")
    root = os.path.realpath(fs.strip_protocol(prefix))
    # The folder itself may be a symlink: judge where its parent really is, never its target.
    parent = os.path.realpath(os.path.dirname(fs.strip_protocol(path)))
    return parent == root or parent.startswith(root + os.sep)


def find_garbage(store: StepStore, keep: set[str], *, now: float | None = None, leftovers: bool = True,
                 temp_root: str | None = None, machine: bool = False) -> GcReport:
    """What a collection keeping ``keep`` (output names relative to the prefix) would remove.

    Args:
        now: the time ttls are judged at (default: now).
        leftovers: also the attempt folders and shuffle spill killed processes left in the store.
        machine: also this machine's temporary folders of processes that are gone (under
            ``temp_root``, default the temporary folder).
    """
    files = list(fs.walk_files(store.prefix))
    sizes = _output_sizes(files)
    report = GcReport()
    expired = expired_outputs(store, (o for o in sizes if o in keep), now=time.time() if now is None else now)
    candidates = []
    for folder, size in sorted(sizes.items()):
        if folder in keep and folder not in expired:
            report.reachable += 1
            continue
        if not _inside(store.prefix, store.output_path(folder)):
            continue
        if held(StepRecord(store.output_path(folder)).meta) is not None:
            report.kept_live.append(folder)
            continue
        candidates.append((folder, size, EXPIRED if folder in expired else UNREACHABLE))
    models = _holding_checkpoints(files, {folder for folder, _size, _why in candidates})
    report.entries = [GcEntry(folder, size, why, folder in models)
                      for folder, size, why in candidates]
    if leftovers:
        going = set(report.removed)
        staying = [o for o in sizes if o not in going]
        report.leftovers = store_leftovers(store, staying, files, report.problems)
        report.leftovers += [Leftover(path, DEAD_RUN_KIND, size) for path, size in dead_run_roots(store.prefix)]
    if machine:
        report.leftovers += temp_leftovers(temp_root)
    return report


SPARED_ROOT = "a root registered it since it was found"
SPARED_RUN = "a live run planned it"
SPARED_LEASE = "a live lease holds it"


def remove_garbage(store: StepStore, report: GcReport, *, models: bool = True, keep: Iterable[str] = (),
                   ttl: float = 30.0) -> None:
    """Remove what ``report`` found (``models``: its models too; else those stay), holding the
    store's collection lease: the roots and the live runs' temporary roots are read again then,
    and what a root (or ``keep``) reaches now, what a live run planned, and what a live lease
    holds are spared (``report.spared``); each output's lease, and the collection's own, are
    looked at again just before it goes.

    Raises:
        CollectionBusy: another collection is removing (nothing removed).
        ValueError: a root or a run's temporary root is damaged (nothing removed).
        LeaseLost: the collection's lease expired (it stalled): it removes no more.
    """
    going = [e for e in report.entries if models or not e.model]
    with collection_lock(store.prefix, ttl=ttl) as lease:
        by_runs = runs_kept(store.prefix)
        rooted = {o for r in read_roots(store.prefix) for o in r.outputs} | set(keep)
        removing = []
        for e in going:
            if e.folder in by_runs:
                report.spared.append((e.folder, SPARED_RUN))
            elif e.why == UNREACHABLE and e.folder in rooted:
                report.spared.append((e.folder, SPARED_ROOT))
            else:
                removing.append(e.folder)
        markers = marker_paths(store.prefix, removing) if removing else {}
        for folder in removing:
            lease.check()
            if held(StepRecord(store.output_path(folder)).meta) is not None:
                report.spared.append((folder, SPARED_LEASE))  # kept whole: its done marker too
                continue
            for marker in markers.get(folder, ()):
                fs.delete(marker)  # first: a marker never outlives its output
            fs.rm_tree(store.output_path(folder))
        report.spared += [(e.folder, "a model, kept without --yes") for e in report.entries if e not in going]
        lease.check()
        remove_leftovers(report.leftovers)


def collect_garbage(store: StepStore, keep: set[str], *, dry_run: bool = False) -> GcReport:
    """Remove the outputs not in ``keep`` and the store's leftovers (:func:`find_garbage`, then
    :func:`remove_garbage` unless ``dry_run``, which spares what the store's roots and live runs
    keep at that moment too), models included."""
    report = find_garbage(store, keep)
    if not dry_run:
        remove_garbage(store, report, keep=keep)
    return report
