"""What killed or taken-over processes leave behind, and outputs past their ``ttl``: what ``marin gc``
may remove besides the outputs no root reaches.

Left over in the store, for a step that no live lease holds:

- **attempt folders no record names**: ``<output>/.attempts/<lease>/`` of an attempt that lost its
  lease to another (the success record, or for an unfinished step the status record, names the
  folder that counts; every other one is dead weight);
- **shuffle spill of a finished step**: ``.shuffle/`` work folders (zephyr's grouping) beside a
  published build; the step removes them itself when it finishes, unless it was cut off after
  an earlier attempt spilled.

Left over on this machine: the temporary folders of the worker pool, job logs, metrics staging and
shard scratch whose process is gone (:mod:`rigging.tempdirs`; a live process's are never touched).

A step that declared ``ttl=`` has its output *expired* once ``ttl`` has passed since it finished:
``marin gc`` may remove it although a root reaches it; it is built (or fetched) again when next needed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from marin.execution.store.layout import ATTEMPTS_DIR
from marin.execution.store.step_record import DamagedRecord, StepRecord
from marin.execution.store.store import StepStore
from rigging import filesystem as fs
from rigging.lease import held
from rigging.tempdirs import dead_tempdirs

__all__ = ["ATTEMPT_KIND", "DEAD_RUN_KIND", "SHUFFLE_KIND", "Leftover", "expired_outputs", "remove_leftovers",
           "store_leftovers", "temp_leftovers"]

ATTEMPT_KIND = "attempt folder no record names"
SHUFFLE_KIND = "shuffle spill of a finished step"
DEAD_RUN_KIND = "temporary root of a run that is gone"


@dataclass(frozen=True)
class Leftover:
    """A folder left behind: where, what it is, and its size in bytes."""

    path: str
    kind: str
    bytes: int
    output: str | None = None
    """The step output folder it lies in (its lease is looked at again before it goes), if any."""


def _sizes_by_output(files: Iterable[tuple[str, int]], outputs: set[str], work: str) -> dict[str, dict[str, int]]:
    """For each of ``outputs`` that has some, the bytes under each of its attempt folders and work
    folders, from one pass over the store's files (``files``: paths relative to the prefix)."""
    by_output: dict[str, dict[str, int]] = {}
    for rel, size in files:
        for marker in (f"/{ATTEMPTS_DIR}/", f"/{work}/"):
            output, found, rest = rel.partition(marker)
            if found and output in outputs:
                break
        else:
            continue
        parts = [marker.strip("/"), *rest.split("/")]
        sizes = by_output.setdefault(output, {})
        if parts[0] == ATTEMPTS_DIR and len(parts) > 2:
            key = f"{ATTEMPTS_DIR}/{parts[1]}"
            sizes[key] = sizes.get(key, 0) + size
            if parts[2] == work and len(parts) > 3:
                sizes[f"{key}/{work}"] = sizes.get(f"{key}/{work}", 0) + size
        elif parts[0] == work and len(parts) > 1:
            sizes[work] = sizes.get(work, 0) + size
    return by_output


def _of_output(store: StepStore, output: str, sizes: Mapping[str, int], work: str) -> list[Leftover]:
    """The leftovers of one output folder, from the sizes of its attempt and work folders.

    Raises:
        DamagedRecord: its success or status record cannot be read: which attempt folder holds
            its build is unknown, so none of them is a leftover.
    """
    path = store.output_path(output)
    record = StepRecord(path)
    if held(record.meta) is not None:
        return []  # a running step: everything of it may be in use
    success = record.read_success_checked()
    if success is not None:
        named = success.attempt_folder
    else:
        status = record.read_status_checked()
        named = status.attempt_folder if status is not None else ""
    found = []
    for folder, size in sorted(sizes.items()):
        if folder.startswith(ATTEMPTS_DIR + "/") and folder.count("/") == 1 and folder != named:
            found.append(Leftover(fs.join(path, folder), ATTEMPT_KIND, size, path))
        elif folder.endswith(work) and success is not None and (folder == work
                                                                      or folder.startswith(named + "/")):
            found.append(Leftover(fs.join(path, folder), SHUFFLE_KIND, size, path))
    return found


def store_leftovers(store: StepStore, outputs: Iterable[str], files: Iterable[tuple[str, int]],
                    problems: list[str] | None = None) -> list[Leftover]:
    """The attempt folders and shuffle spill left in ``outputs`` (output names), given the store's
    files (``(path relative to the prefix, size)``, as :func:`rigging.filesystem.walk_files` lists
    them): nothing of a step a live lease holds, nor of one whose records cannot be read (a line
    saying so goes to ``problems``: a damaged record is never read as absent)."""
    # Here, not at import: zephyr (numpy ...) is loaded for a collection, never by the verbs that import the store.
    from zephyr.shuffle import WORK_FOLDER

    found = []
    for output, sizes in sorted(_sizes_by_output(files, set(outputs), WORK_FOLDER).items()):
        try:
            found.extend(_of_output(store, output, sizes, WORK_FOLDER))
        except DamagedRecord as e:
            if problems is not None:
                problems.append(f"{output}: its leftovers are kept: {e}")
    return found


def temp_leftovers(root: str | None = None) -> list[Leftover]:
    """This machine's temporary folders whose process is gone (:func:`rigging.tempdirs.dead_tempdirs`)."""
    return [Leftover(d.path, d.kind, sum(size for _rel, size in fs.walk_files(d.path)))
            for d in dead_tempdirs(root)]


def expired_outputs(store: StepStore, outputs: Iterable[str], now: float | None = None) -> dict[str, float]:
    """The outputs among ``outputs`` whose ``ttl`` has passed, with when it did (a live lease's never)."""
    now = time.time() if now is None else now
    found = {}
    for output in outputs:
        record = StepRecord(store.output_path(output))
        success = record.read_success()
        expires = success.expires_at() if success is not None else None
        if expires is not None and expires <= now and held(record.meta) is None:
            found[output] = expires
    return found


def remove_leftovers(leftovers: Iterable[Leftover]) -> int:
    """Remove every leftover folder, but those of a step a live lease holds now; returns the bytes freed."""
    freed = 0
    for leftover in leftovers:
        if leftover.output is not None and held(StepRecord(leftover.output).meta) is not None:
            continue  # a new attempt started since it was found: it may be writing there
        fs.rm_tree(leftover.path)
        freed += leftover.bytes
    return freed
