"""Processes named so that a reused pid is never mistaken for them, and ending those left behind."""

from __future__ import annotations

import logging
import os
import signal
import socket
import time

import psutil

__all__ = ["end_orphaned_process", "process_identity"]

logger = logging.getLogger(__name__)


def _start_time(pid: int) -> str:
    """When process ``pid`` started, as text ("" if it is gone or unknown)."""
    try:
        return repr(psutil.Process(pid).create_time())
    except (psutil.Error, OSError):
        return ""


def process_identity(pid: int) -> str:
    """``host:pid:start time`` of process ``pid`` of this host: unique even when pids are reused."""
    return f"{socket.gethostname()}:{pid}:{_start_time(pid)}"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def _stopped(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except psutil.Error:
        return False


def end_orphaned_process(identity: str, wait_s: float = 10.0) -> bool:
    """End the process group of ``identity`` (from :func:`process_identity`) if it still runs.

    It gets ``wait_s`` seconds to end on its own (a worker whose parent died notices within its
    watchdog's interval) before its group is killed; a stopped (frozen) process cannot notice
    anything and is killed at once. Another host's process, this process, or one whose pid now
    belongs to another process is left alone.

    Returns:
        True when the process is known to have ended (it was gone, its pid now names another
        process, or it was killed here and is gone); False when nothing here can say (another
        host's process, an identity not of this form, this process, or one that outlived its kill).
    """
    host, pid_text, started = (identity.split(":") + ["", ""])[:3]
    if host != socket.gethostname() or not pid_text.isdigit() or int(pid_text) == os.getpid():
        return False
    pid = int(pid_text)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if not _alive(pid) or _start_time(pid) != started:
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
    while _alive(pid) and time.monotonic() < deadline + 5.0:
        time.sleep(0.05)
    return not _alive(pid)
