"""Loopback ports for the servers tests start (emulators, Ray heads), and the threaded TCP server
the tests' proxies are built on."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Self
from urllib.parse import urlsplit

__all__ = ["LOOPBACK", "LoopbackServer", "free_port", "proxy_target", "reachable"]

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


def proxy_target(target: str) -> tuple[str, int]:
    """``(host, port)`` of a proxy's ``target`` (``http://host:port``).

    Raises:
        ValueError: ``target`` names no host and port.
    """
    parts = urlsplit(target)
    if not parts.hostname or not parts.port:
        raise ValueError(f"proxy target must be http://host:port, got {target!r}")
    return parts.hostname, parts.port


class LoopbackServer:
    """A TCP server on an ephemeral port of ``host`` that serves each connection in a thread of its
    own (:meth:`_serve`, which a subclass defines); ``url``, :meth:`close` and ``with``.

    A subclass sets its own state, then calls :meth:`_listen` last in its ``__init__``: from then on
    connections are served.
    """

    thread_name = "loopback-server"
    """The accepting thread's name (each connection's thread adds ``-conn``)."""

    def _listen(self, host: str, backlog: int) -> None:
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind((host, 0))
        self._server.listen(backlog)
        self.host, self.port = host, int(self._server.getsockname()[1])
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True, name=self.thread_name)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._server.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True, name=f"{self.thread_name}-conn").start()

    def _serve(self, client: socket.socket) -> None:
        raise NotImplementedError
