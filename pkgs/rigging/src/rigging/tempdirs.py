"""Temporary folders that name the process that made them, so that what a killed process left can
be told from what a live one uses.

A folder made by :func:`owned_tempdir` is ``<tmp>/<prefix><pid>-n<pid namespace>s<start>-<random>``:
the process's id, the inode of its PID namespace and its start time in clock ticks after boot
(:class:`rigging.pids.ProcessPlace`). While that process lives, the folder is its own; once it is
known gone (killed, or it exited without cleaning up), the folder is left over, and
:func:`dead_tempdirs` finds it. A folder of a process in another PID namespace (a container sharing
this ``/tmp``) is never taken for a leftover: its pid cannot be checked from here. Nor is a folder
whose name carries no process id after a known prefix, or only a pid (named before the namespace
was: remove such folders by hand once no process of that older version runs).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

from rigging.pids import ProcessPlace

__all__ = ["FRAY_LOGS", "FRAY_POOL", "FRAY_POOL_RESULTS", "LEFTOVER_KINDS", "LEVANTER_METRICS", "LEVANTER_WANDB",
           "MARIN_STEP_LOG",
           "ZEPHYR_SHARD", "DeadTempdir", "dead_tempdirs", "owned_prefix", "owned_tempdir"]

FRAY_POOL = "fray-pool-"
FRAY_POOL_RESULTS = "fray-pool-results-"
FRAY_LOGS = "fray-logs-"
LEVANTER_METRICS = "levanter-metrics-"
LEVANTER_WANDB = "levanter-wandb-"
MARIN_STEP_LOG = "marin-log-"
ZEPHYR_SHARD = "zephyr-shard-"

LEFTOVER_KINDS: Mapping[str, str] = {
    FRAY_POOL: "worker pool logs",
    FRAY_POOL_RESULTS: "worker pool results",
    FRAY_LOGS: "job logs",
    LEVANTER_METRICS: "metrics staging",
    LEVANTER_WANDB: "W&B run staging",
    MARIN_STEP_LOG: "step logs for a remote store",
    ZEPHYR_SHARD: "shard scratch",
}
"""Every prefix the project's libraries make temporary folders under, and what such a folder holds."""


_PLACE_RE = re.compile(r"n(\d+)s(\d+)")


def owned_prefix(prefix: str, place: ProcessPlace | None = None) -> str:
    """The start of the name of a folder :func:`owned_tempdir` makes for the process at ``place``
    (default: this one): ``<prefix><pid>-n<pid namespace>s<start>-`` (``<prefix><pid>-`` where
    ``/proc`` cannot say: such a folder is never taken for a leftover)."""
    place = place or ProcessPlace.here()
    if place is None:
        return f"{prefix}{os.getpid()}-"
    return f"{prefix}{place.pid}-n{place.pid_namespace}s{place.started}-"


def owned_tempdir(prefix: str) -> str:
    """A new temporary folder named after ``prefix`` and this process (:func:`owned_prefix`)."""
    return tempfile.mkdtemp(prefix=owned_prefix(prefix))


@dataclass(frozen=True)
class DeadTempdir:
    """A temporary folder whose process is gone."""

    path: str
    kind: str
    pid: int


def _owner(name: str, boot_id: str) -> tuple[str, int, ProcessPlace | None] | None:
    """(prefix, pid, the process's place when the name says it) of a folder name made by
    :func:`owned_tempdir` under a known prefix; the place is of this boot (``boot_id``): a folder in
    this machine's temporary folder whose process ran in an earlier boot is gone anyway."""
    # Longest prefix first: "fray-pool-results-12-x" is the results folder, not a pool folder.
    for prefix in sorted(LEFTOVER_KINDS, key=len, reverse=True):
        parts = name.removeprefix(prefix).split("-") if name.startswith(prefix) else []
        if not parts or not parts[0].isdigit():
            continue
        pid = int(parts[0])
        found = _PLACE_RE.fullmatch(parts[1]) if len(parts) == 3 else None
        if found is None or pid <= 0:
            return prefix, pid, None
        return prefix, pid, ProcessPlace(pid, boot_id, int(found.group(1)), int(found.group(2)))
    return None


def dead_tempdirs(root: str | None = None, prefixes: Mapping[str, str] = LEFTOVER_KINDS) -> list[DeadTempdir]:
    """The folders under ``root`` (default: the temporary folder) made by :func:`owned_tempdir` with
    one of ``prefixes`` whose process is known gone (:meth:`rigging.pids.ProcessPlace.gone`), sorted
    by path."""
    root = root or tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    me = ProcessPlace.here()
    if me is None:
        return []  # no /proc to tell a live process from a gone one
    found = []
    for name in names:
        owner = _owner(name, me.boot_id)
        path = os.path.join(root, name)
        if owner is None or owner[0] not in prefixes or not os.path.isdir(path) or os.path.islink(path):
            continue
        prefix, pid, place = owner
        if place is not None and place.gone():
            found.append(DeadTempdir(path, prefixes[prefix], pid))
    return sorted(found, key=lambda d: d.path)
