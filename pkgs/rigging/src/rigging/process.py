"""Processes named so that a reused pid is never mistaken for them, and ending those left behind."""

from __future__ import annotations

import logging
import os
import signal
import socket
import time

import psutil

from rigging.pids import ProcessPlace

__all__ = ["end_orphaned_process", "process_identity", "running"]

logger = logging.getLogger(__name__)


def process_identity(pid: int) -> str:
    """``host:<place>`` of process ``pid`` of this namespace (:meth:`rigging.pids.ProcessPlace.to_text`:
    pid, boot, PID namespace and start time): unique even when pids are reused, and judged only
    where its pid means something. ``host:pid:`` where ``/proc`` cannot say."""
    place = ProcessPlace.here(pid)
    return f"{socket.gethostname()}:{place.to_text() if place is not None else f'{pid}:'}"


def running(pid: int) -> bool:
    """Whether process ``pid`` of this namespace exists and is not a zombie (one that ended and was
    not yet reaped). A process that ends while it is being read counts as not running."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _stopped(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except psutil.Error:
        return False


def end_orphaned_process(identity: str, wait_s: float = 10.0) -> bool:
    """End the process group of ``identity`` (from :func:`process_identity`) if it still runs.

    It gets ``wait_s`` seconds to end on its own (a worker whose parent died notices within its
    watchdog's interval) before its group is killed; a stopped (frozen) process cannot notice
    anything and is killed at once. A process whose pid means nothing here (another boot or PID
    namespace: another machine, or a container sharing this one's host name), this process, or one
    whose pid now belongs to another process is left alone.

    Returns:
        True when the process is known to have ended (:meth:`rigging.pids.ProcessPlace.gone`, or
        killed here and gone since); False when nothing here can say (its pid means nothing here,
        an identity not of this form or of an older one without its place, this process, or one
        that outlived its kill).
    """
    place = ProcessPlace.from_text(identity.partition(":")[2])
    if place is None or place.pid == os.getpid() or not place.checkable_here():
        return False
    pid = place.pid
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if place.gone():
            return True
        if _stopped(pid):
            break
        time.sleep(0.1)
    logger.warning("ending the process %d left behind by a dead parent", pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    while not place.gone() and time.monotonic() < deadline + 5.0:
        time.sleep(0.05)
    return place.gone()
