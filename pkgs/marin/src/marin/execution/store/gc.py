"""Garbage collection: remove step outputs under the prefix that no given experiment reaches."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from marin.execution.store.done_index import INDEX_DIR, unmark
from marin.execution.store.layout import ATTEMPTS_DIR, META_DIR
from marin.execution.store.step_record import StepRecord
from marin.execution.store.store import StepStore
from rigging import filesystem as fs
from rigging.lease import held

__all__ = ["GcReport", "collect_garbage", "find_outputs"]


@dataclass
class GcReport:
    """What gc removed (or would remove), kept and freed."""

    removed: list[str] = field(default_factory=list)
    kept_live: list[str] = field(default_factory=list)
    freed_bytes: int = 0


def find_outputs(store: StepStore) -> dict[str, int]:
    """Every step output folder under the prefix (has a ``.marin/`` folder) with its size in bytes."""
    sizes: dict[str, int] = {}
    marker = f"/{META_DIR}/"
    for rel, size in fs.walk_files(store.prefix):
        if rel.startswith(INDEX_DIR + "/"):
            continue  # the done index is the store's, not a step's
        rel = "/" + rel
        cut = rel.find(marker)
        if cut < 0:
            continue
        # An attempt folder's own .marin/ (a step's progress record) belongs to its step's folder.
        folder = rel[1:cut].partition(f"/{ATTEMPTS_DIR}/")[0]
        if folder.startswith(ATTEMPTS_DIR + "/"):
            continue
        sizes[folder] = sizes.get(folder, 0) + size
    # Files of the step itself (outside .marin/) count toward its size too.
    totals = dict.fromkeys(sizes, 0)
    for rel, size in fs.walk_files(store.prefix):
        for folder in _owners(rel, totals):
            totals[folder] += size
    return totals


def _owners(rel: str, folders: dict[str, int]) -> list[str]:
    parts = rel.split("/")
    return [p for p in ("/".join(parts[:i]) for i in range(1, len(parts))) if p in folders]


def _inside(prefix: str, path: str) -> bool:
    if not fs.is_local(prefix):
        return path.startswith(prefix.rstrip("/") + "/")
    root = os.path.realpath(fs.strip_protocol(prefix))
    # The folder itself may be a symlink: judge where its parent really is, never its target.
    parent = os.path.realpath(os.path.dirname(fs.strip_protocol(path)))
    return parent == root or parent.startswith(root + os.sep)


def collect_garbage(store: StepStore, keep: set[str], *, dry_run: bool = False) -> GcReport:
    """Remove output folders not in ``keep`` (output names relative to the prefix).

    Never touches a folder held by a live lease, and never anything outside the prefix.
    """
    report = GcReport()
    for folder, size in sorted(find_outputs(store).items()):
        if folder in keep:
            continue
        path = store.output_path(folder)
        if not _inside(store.prefix, path):
            continue
        if held(StepRecord(path).meta) is not None:
            report.kept_live.append(folder)
            continue
        report.removed.append(folder)
        report.freed_bytes += size
    if not dry_run and report.removed:
        unmark(store.prefix, report.removed)  # first: a marker never outlives its output
        for folder in report.removed:
            fs.rm_tree(store.output_path(folder))
    return report
