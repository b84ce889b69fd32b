"""Where a process id means something, and whether the process a record names is known to be gone.

A pid alone names a process only inside one PID namespace of one boot of one machine, and only
until it is reused. Containers on one host share its host name (``docker run --net=host``,
``hostNetwork`` pods) but not its PID namespace: there ``os.kill(pid, 0)`` fails for a live process
of the neighbour, so a failed signal never says that a holder is dead. A record names its process
by a :class:`ProcessPlace` (the boot id, the PID namespace's inode, the pid and the process's start
time in clock ticks after boot) and the process is *known gone* (:meth:`ProcessPlace.gone`) only
when all of these hold:

* this process runs in the same boot (``/proc/sys/kernel/random/boot_id``) and the same PID
  namespace (the inode of ``/proc/self/ns/pid``), and this ``/proc`` shows that namespace;
* the pid does not exist here, or is a zombie, or started at another time (a reused pid).

Anything else (another machine, another boot, another namespace, a record without a place, a system
without ``/proc``) cannot be checked from here: the holder is alive until its lease or heartbeat
expires. Standard library only: leases and sweeps ask often.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["ProcessPlace", "holder_live"]

_BOOT_ID = "/proc/sys/kernel/random/boot_id"
# /proc/<pid>/stat: "pid (comm) state ppid ..." (comm may hold spaces and parentheses: cut at the
# last one); the start time is field 22, the 20th after the command's name.
_STATE, _STARTED = 0, 19
# This process's own place, by pid (a forked child finds its own): checked at every lease look-up.
_OWN: dict[int, ProcessPlace | None] = {}


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command's name; None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields if len(fields) > _STARTED else None


def _proc_is_ours() -> bool:
    """Whether this ``/proc`` numbers processes as this process's PID namespace does (a process that
    entered a new namespace without mounting its own ``/proc`` sees its parent's numbers)."""
    try:
        return os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return False


@dataclass(frozen=True)
class ProcessPlace:
    """A process named where its pid means something (see the module docstring).

    Attributes:
        pid: its id in its PID namespace.
        boot_id: the boot of the machine it runs on.
        pid_namespace: the inode of its PID namespace.
        started: when it started, in clock ticks after boot (``/proc/<pid>/stat`` field 22).
    """

    pid: int
    boot_id: str
    pid_namespace: int
    started: int

    def __post_init__(self) -> None:
        if self.pid <= 0:
            raise ValueError(f"pid must be > 0, got {self.pid}")
        if not self.boot_id:
            raise ValueError("boot_id must not be empty")

    @classmethod
    def here(cls, pid: int | None = None) -> ProcessPlace | None:
        """Process ``pid`` of this namespace (default: this process); None where ``/proc`` cannot say
        (not Linux, a ``/proc`` of another namespace, no such process)."""
        own = pid is None or pid == os.getpid()
        if own and os.getpid() in _OWN:
            return _OWN[os.getpid()]
        if not own and not _proc_is_ours():
            return None
        fields = _stat_fields("self" if own or pid is None else pid)
        try:
            with open(_BOOT_ID) as f:
                boot = f.read().strip()
            namespace = os.stat("/proc/self/ns/pid").st_ino
        except OSError:
            return None
        if fields is None or not boot or not fields[_STARTED].isdigit():
            return None
        place = cls(os.getpid() if own or pid is None else pid, boot, namespace, int(fields[_STARTED]))
        if own:
            _OWN[os.getpid()] = place
        return place

    def checkable_here(self) -> bool:
        """Whether this process can tell if :attr:`pid` still runs: same boot, same PID namespace,
        and a ``/proc`` of that namespace."""
        me = ProcessPlace.here()
        return (me is not None and me.boot_id == self.boot_id and me.pid_namespace == self.pid_namespace
                and _proc_is_ours())

    def gone(self) -> bool:
        """True only when the process is known to have ended: checkable here, and its pid is gone, a
        zombie, or now names a process that started at another time. Never from a failed signal."""
        if self.pid == os.getpid() or not self.checkable_here():
            return False
        fields = _stat_fields(self.pid)
        if fields is None:
            return not os.path.exists(f"/proc/{self.pid}")  # unreadable but there: it may run
        return fields[_STATE] == "Z" or fields[_STARTED] != str(self.started)

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "boot_id": self.boot_id, "pid_namespace": self.pid_namespace,
                "started": self.started}

    @classmethod
    def from_json(cls, data: Any) -> ProcessPlace | None:
        """The place a record holds; None when it holds none or a damaged one (its process can then
        not be checked: alive until its expiry)."""
        if not isinstance(data, dict):
            return None
        pid, boot, namespace, started = (data.get(k) for k in ("pid", "boot_id", "pid_namespace", "started"))
        if not (all(type(v) is int for v in (pid, namespace, started)) and isinstance(boot, str) and boot):
            return None
        assert isinstance(pid, int) and isinstance(namespace, int) and isinstance(started, int)
        return cls(pid, boot, namespace, started) if pid > 0 else None

    def to_text(self) -> str:
        """``pid@boot_id/pid_namespace/started``: the place in one word (names, process identities)."""
        return f"{self.pid}@{self.boot_id}/{self.pid_namespace}/{self.started}"

    @classmethod
    def from_text(cls, text: str) -> ProcessPlace | None:
        """The place :meth:`to_text` wrote; None for anything else."""
        pid, _, rest = text.partition("@")
        boot, _, rest = rest.partition("/")
        namespace, _, started = rest.partition("/")
        if not (pid.isdigit() and boot and namespace.isdigit() and started.isdigit()) or int(pid) <= 0:
            return None
        return cls(int(pid), boot, int(namespace), int(started))


def holder_live(expires_at: float, process: ProcessPlace | None, now: float | None = None) -> bool:
    """Whether a holder (of a lease, a run's root) whose record says ``expires_at`` and names its
    process at ``process`` (None: the record does not say) holds now: not expired, and its process
    not known gone (:meth:`ProcessPlace.gone`)."""
    if (now if now is not None else time.time()) >= expires_at:
        return False
    return process is None or not process.gone()
