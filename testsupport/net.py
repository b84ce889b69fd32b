"""Loopback ports for the servers tests start (emulators, Ray heads)."""

from __future__ import annotations

import socket

__all__ = ["LOOPBACK", "free_port", "reachable"]

LOOPBACK = "127.0.0.1"
"""Every server a test starts listens here only."""


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that was free a moment ago (the caller must still handle losing a race for it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def reachable(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        return s.connect_ex((host, port)) == 0
