"""Loopback ports for the servers tests start (emulators, Ray heads)."""

from __future__ import annotations

import socket
import threading

__all__ = ["LOOPBACK", "free_port", "reachable"]

LOOPBACK = "127.0.0.1"
"""Every server a test starts listens here only."""


_handed_out: set[int] = set()
_lock = threading.Lock()


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that was free a moment ago and that this process has never been given before.

    The kernel may give the same port to two binds in a row once the first socket is closed, so a
    caller asking for several ports at once (a Ray head takes six) could get one twice; a port is
    therefore handed out at most once per process. The caller must still handle losing a race for
    it to another process.
    """
    with _lock:
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                port = int(s.getsockname()[1])
            if port not in _handed_out:
                _handed_out.add(port)
                return port


def reachable(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        return s.connect_ex((host, port)) == 0
