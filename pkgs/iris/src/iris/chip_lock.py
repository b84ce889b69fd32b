"""Who holds the accelerator: its runtime's lock file, and the errors of a process that found it held.

libtpu takes a POSIX (``fcntl``) write lock over the whole of its lock file (``/tmp/libtpu_lockfile``)
when a process opens the TPU, and holds it for the life of that process; a second process then
fails at once (:data:`BUSY_ERRORS`). ``F_GETLK`` asks the kernel, without taking anything, whether
a write lock would conflict and, if so, which process holds it (:func:`lock_holder`). The file
stays after its holder ends, unlocked: its existence says nothing, unless this user may not open it
(libtpu makes it ``0600``: left by another user's process, running or not); then no process here
can open the accelerator either, and the holder is named as unreadable.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import struct
from dataclasses import dataclass

__all__ = ["BUSY_ERRORS", "LockHolder", "busy_error", "lock_holder"]

BUSY_ERRORS: tuple[str, ...] = (
    "multi-process lockfile",  # libtpu: "Internal error when accessing libtpu multi-process lockfile"
    "TPU is already in use",  # libtpu: "The TPU is already in use by process with pid N"
    "CUDA_ERROR_DEVICE_UNAVAILABLE",  # a GPU in exclusive-process mode held by another process
    "busy or unavailable",  # CUDA's "all CUDA-capable devices are busy or unavailable"
)
"""Text in a process's error that says it found the accelerator held by another process."""

_FLOCK = "hhqqi"  # struct flock: l_type, l_whence, l_start, l_len, l_pid (native alignment)


@dataclass(frozen=True)
class LockHolder:
    """The process holding an accelerator's lock file.

    Attributes:
        path: the lock file.
        pid: the holder's process id; None where the kernel did not say (another PID namespace).
        command: its command line (``/proc/<pid>/cmdline``); None where it cannot be read.
        readable: False when this user may not open the file, so no holder can be asked for.
    """

    path: str
    pid: int | None
    command: str | None = None
    readable: bool = True

    def describe(self) -> str:
        """``/tmp/libtpu_lockfile is held by pid 4242 (python train.py)``."""
        if not self.readable:
            return (f"{self.path} is held by a process of another user, or left over: remove {self.path} "
                    "if no TPU process runs")
        who = f"pid {self.pid}" if self.pid is not None else "a process this one cannot see"
        what = f" ({self.command})" if self.command else ""
        return f"{self.path} is held by {who}{what}"


def _command_line(pid: int, limit: int = 160) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(4096)
    except OSError:
        return None
    words = [w.decode(errors="replace") for w in raw.split(b"\0") if w]
    text = " ".join(words)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def lock_holder(path: str) -> LockHolder | None:
    """Who holds a POSIX write lock on ``path`` now; None when nobody does, or the file does not
    exist (a process that opens the accelerator creates it). A file this user may not open is a
    holder that cannot be read (:attr:`LockHolder.readable`): this user's runtime cannot open it either.

    A lock held by this very process never conflicts with its own, so it is not seen here.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOCTTY)
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM):
            return LockHolder(path, None, readable=False)
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise
    try:
        query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        kind, _whence, _start, _length, pid = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query))
    finally:
        os.close(fd)
    if kind == fcntl.F_UNLCK:
        return None
    holder_pid = pid if pid > 0 else None
    return LockHolder(path, holder_pid, _command_line(holder_pid) if holder_pid is not None else None)


def busy_error(text: str | None) -> str | None:
    """The line of a process's error output that says the accelerator was held by another process
    (:data:`BUSY_ERRORS`), or None."""
    if not text:
        return None
    for line in text.splitlines():
        if any(marker.lower() in line.lower() for marker in BUSY_ERRORS):
            return re.sub(r"\s+", " ", line).strip()
    return None
