"""A loopback proxy that adds latency to every request and counts them (object-store benchmarks)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from testsupport.net import LOOPBACK, LoopbackServer, proxy_target

__all__ = ["LatencyProxy"]

_HTTP_METHODS = (b"GET ", b"POST ", b"PUT ", b"PATCH ", b"DELETE ", b"HEAD ")


class LatencyProxy(LoopbackServer):
    """A loopback TCP proxy that delays every request by ``delay_s`` and counts requests.

    Put in front of the GCS emulator so that each round trip costs what it costs from a cloud VM
    (tens of milliseconds), and so that tests and benchmarks can count how many requests a
    command made. Each client connection is served by its own thread, so requests made in
    parallel wait out their delays in parallel (the emulator behind it answers one at a time).
    A request is counted when its request line (``GET /path HTTP/1.1``) is seen; the emulator
    closes every connection after one answer, so that is one request per connection.

    Args:
        target: ``http://host:port`` of the server to forward to.
        delay_s: seconds added before forwarding each request (may be changed at any time).
    """

    thread_name = "latency-proxy"

    def __init__(self, target: str, delay_s: float = 0.0, host: str = LOOPBACK):
        self._target = proxy_target(target)
        if delay_s < 0:
            raise ValueError(f"delay_s must be >= 0, got {delay_s}")
        self.delay_s = delay_s
        self._lock = threading.Lock()
        self.requests: list[str] = []  # "METHOD path" of every request seen, in arrival order
        self._listen(host, 256)

    def count(self) -> int:
        """Requests seen so far."""
        with self._lock:
            return len(self.requests)

    def reset(self) -> list[str]:
        """Forget the requests seen so far; returns them."""
        with self._lock:
            seen, self.requests = self.requests, []
        return seen

    def _note(self, chunk: bytes) -> None:
        if chunk.startswith(_HTTP_METHODS):
            line = chunk.split(b"\r\n", 1)[0].decode("latin-1").rsplit(" ", 1)[0]
            with self._lock:
                self.requests.append(line)

    def _serve(self, client: socket.socket) -> None:
        upstream = None
        try:
            first = client.recv(65536)
            if not first:
                return
            self._note(first)
            if self.delay_s:
                time.sleep(self.delay_s)
            upstream = socket.create_connection(self._target)
            upstream.sendall(first)
            back = threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True)
            back.start()
            self._pump(client, upstream, True)
            back.join()
        except OSError:
            pass
        finally:
            for s in (client, upstream):
                if s is not None:
                    with contextlib.suppress(OSError):
                        s.close()

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        try:
            while chunk := source.recv(65536):
                if from_client:
                    # Another request on a kept-alive connection: count and delay it too.
                    if chunk.startswith(_HTTP_METHODS):
                        self._note(chunk)
                        if self.delay_s:
                            time.sleep(self.delay_s)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)
