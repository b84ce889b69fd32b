"""Temporary folders that name the process that made them, so that what a killed process left can
be told from what a live one uses.

A folder made by :func:`owned_tempdir` is ``<tmp>/<prefix><pid>-<random>``. While process ``pid``
lives, the folder is its own; once it is gone (killed, or it exited without cleaning up), the folder
is left over, and :func:`dead_tempdirs` finds it. Nothing else is ever matched: a folder whose name
does not carry a process id after a known prefix is never taken for a leftover.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

from rigging.pids import process_alive

__all__ = ["FRAY_LOGS", "FRAY_POOL", "FRAY_POOL_RESULTS", "LEFTOVER_KINDS", "LEVANTER_METRICS", "LEVANTER_WANDB",
           "MARIN_STEP_LOG",
           "ZEPHYR_SHARD", "DeadTempdir", "dead_tempdirs", "owned_tempdir"]

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


def owned_tempdir(prefix: str) -> str:
    """A new temporary folder named after ``prefix`` and this process's id."""
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")


@dataclass(frozen=True)
class DeadTempdir:
    """A temporary folder whose process is gone."""

    path: str
    kind: str
    pid: int


def _owner(name: str) -> tuple[str, int] | None:
    """(prefix, pid) of a folder name made by :func:`owned_tempdir` under a known prefix."""
    # Longest prefix first: "fray-pool-results-12-x" is the results folder, not a pool folder.
    for prefix in sorted(LEFTOVER_KINDS, key=len, reverse=True):
        pid = name.removeprefix(prefix).split("-", 1)[0] if name.startswith(prefix) else ""
        if pid.isdigit():
            return prefix, int(pid)
    return None


def dead_tempdirs(root: str | None = None, prefixes: Mapping[str, str] = LEFTOVER_KINDS) -> list[DeadTempdir]:
    """The folders under ``root`` (default: the temporary folder) made by :func:`owned_tempdir` with
    one of ``prefixes`` whose process no longer exists on this host, sorted by path."""
    root = root or tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        owner = _owner(name)
        path = os.path.join(root, name)
        if owner is None or owner[0] not in prefixes or not os.path.isdir(path) or os.path.islink(path):
            continue
        if owner[1] != os.getpid() and not process_alive(owner[1]):
            found.append(DeadTempdir(path, prefixes[owner[0]], owner[1]))
    return sorted(found, key=lambda d: d.path)
