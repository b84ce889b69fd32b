"""A job's process group never outlives the job, nor the job its parent.

Every job process (``spawn``-ed by :mod:`fray.local`, forked from a warm template by
:mod:`fray.pool`) leads a process group of its own (``setsid``) that holds whatever it starts.
Two watchers end that group when what it belongs to is gone:

* :func:`watch_parent`, a thread of the job: its parent (the caller, or the warm template) is gone,
  so the job and everything it started are killed;
* :func:`start_group_reaper`, a small process forked into the group as the job starts: the job
  itself was killed outright (SIGKILL, which it cannot act on: Ray kills a force-cancelled worker's
  children so, the kernel's OOM killer does too), so the reaper kills the rest of the group.
  Without it, a subprocess the job had started lived on after the job was cancelled.
"""

from __future__ import annotations

import os
import signal
import threading
import time

__all__ = ["WATCH_INTERVAL_S", "start_group_reaper", "watch_parent"]

WATCH_INTERVAL_S = 0.2
"""How often the watchers look (what a lost parent or job may still run for, at most)."""


def _watch(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            os.killpg(0, signal.SIGKILL)
        time.sleep(WATCH_INTERVAL_S)


def watch_parent(parent_pid: int) -> None:
    """In a job that leads its group: kill the group once ``parent_pid`` is no longer its parent."""
    threading.Thread(target=_watch, args=(parent_pid,), daemon=True, name="fray-watchdog").start()


def start_group_reaper() -> None:
    """In a job that leads its group, before it starts any thread: fork the group's reaper, which
    kills the group once the job is gone (however it ended: the job's own end included, so nothing
    it started outlives it)."""
    job = os.getpid()
    if os.fork() != 0:
        return
    try:
        # A fork of a process with one thread: os calls only from here on. Hold none of the job's
        # files open (its result pipe: the caller must see it close when the job dies).
        os.closerange(3, _max_fd())
        while os.getppid() == job:
            time.sleep(WATCH_INTERVAL_S)
        os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(0)


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (ValueError, OSError):
        return 65536
