"""A loopback HTTP proxy in front of a GCS emulator that fails, seeded: resets, throttling, stalls, torn answers.

Real object stores fail in ways an emulator never does: connections reset while a request body is
sent or just after, 429 and 503 answers with or without ``Retry-After``, requests that hang longer
than any client waits, answers cut short, and a 5xx returned *after* the write took effect, so that
the client's retry finds the object already there. :class:`FaultProxy` plays each of them
(:class:`FaultKind`) in front of a real emulator (fake-gcs-server, which enforces generation
preconditions), so the store's retry rules are proven against the real protocol.

Which request gets which fault:

* **seeded rates**: ``FaultProxy(target, rates={kind: share}, seed=N)`` draws, for every request, one
  number from a ``random.Random(seed)``; the kinds' shares are laid end to end, so the total share
  of requests faulted is their sum. A kind drawn for a request it cannot apply to (a write's fault
  for a read, a cut answer for a write) leaves that request alone.
* **scripted faults** (tests): :meth:`FaultProxy.inject` queues a fault for the next ``times``
  requests a predicate matches (:class:`Request` has the method, target, headers, body and the
  object name, read from the URL or from a multipart upload's metadata); scripted faults come
  before drawn ones.
* **down**: :meth:`FaultProxy.set_down` answers every request 503 until it is turned off.

Every fault injected is logged (:attr:`FaultProxy.log`: :class:`FaultEvent`, with the request it
hit) and counted (:meth:`FaultProxy.counts`); every request is counted too (:meth:`count`).

How each fault is played (the request is read whole first, so a stalled or refused request never
reaches the emulator half-sent):

===================== ======================================================================
``reset-before-body``  the request head and part of its body read, then the connection reset (RST);
                       nothing forwarded (for a request without a body: reset after its head)
``reset-after-body``   the whole request read, then reset; nothing forwarded
``429`` / ``503``      answered at once with that status, nothing forwarded
``429-retry-after``    the same with ``Retry-After: <retry_after_s>``
``503-retry-after``
``stall``              held for ``stall_s`` (longer than the client's timeout); forwarded then only
                       if the client is still connected
``truncated``          forwarded; the answer's head sent with its own ``Content-Length`` and then
                       part of its body, and the connection closed (``hide_truncation``: the head
                       says the cut length, so only the object's hash can tell)
``503-after-write``    a write (POST, PUT, PATCH, DELETE) forwarded and applied, the emulator's
                       answer dropped and 503 sent instead
===================== ======================================================================

Answers are relayed with the emulator's status and headers (a chunked answer is relayed with its
length instead), the ``Location`` of a resumable upload rewritten to point here, and the client's
connection kept alive as HTTP/1.1 allows; ``Expect: 100-continue`` (curl's, hence TensorStore's)
is answered by the proxy.
"""

from __future__ import annotations

import contextlib
import enum
import json
import random
import re
import select
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO
from urllib.parse import parse_qs, unquote, urlsplit

from testsupport.net import LOOPBACK, LoopbackServer, proxy_target

__all__ = ["FaultEvent", "FaultKind", "FaultProxy", "Request", "spread_rate"]


class FaultKind(enum.Enum):
    """What the proxy does to one request (see the module's table)."""

    RESET_BEFORE_BODY = "reset-before-body"
    RESET_AFTER_BODY = "reset-after-body"
    THROTTLED = "429"
    THROTTLED_RETRY_AFTER = "429-retry-after"
    UNAVAILABLE = "503"
    UNAVAILABLE_RETRY_AFTER = "503-retry-after"
    STALL = "stall"
    TRUNCATED = "truncated"
    UNAVAILABLE_AFTER_WRITE = "503-after-write"

    @property
    def status(self) -> int | None:
        """The status it answers with (None: it answers nothing of its own, or what the emulator said)."""
        return {FaultKind.THROTTLED: 429, FaultKind.THROTTLED_RETRY_AFTER: 429, FaultKind.UNAVAILABLE: 503,
                FaultKind.UNAVAILABLE_RETRY_AFTER: 503, FaultKind.UNAVAILABLE_AFTER_WRITE: 503}.get(self)

    def applies_to(self, request: Request) -> bool:
        """Whether this fault means something for ``request``: a write's fault needs a write, a cut
        answer an answer with a body (a read)."""
        if self is FaultKind.UNAVAILABLE_AFTER_WRITE:
            return request.is_write
        if self is FaultKind.TRUNCATED:
            return request.method == "GET"
        return True


_WEIGHTS = {FaultKind.RESET_BEFORE_BODY: 2, FaultKind.RESET_AFTER_BODY: 2, FaultKind.THROTTLED: 1,
            FaultKind.THROTTLED_RETRY_AFTER: 1, FaultKind.UNAVAILABLE: 1, FaultKind.UNAVAILABLE_RETRY_AFTER: 1,
            FaultKind.STALL: 1, FaultKind.TRUNCATED: 2, FaultKind.UNAVAILABLE_AFTER_WRITE: 4}
"""How a total rate is spread over the kinds (:func:`spread_rate`): kinds that apply to fewer
requests (a write's, a read's) get more of it, so that a run meets every kind about as often."""


def spread_rate(rate: float) -> dict[FaultKind, float]:
    """Per-kind shares summing to ``rate`` (the share of requests that get some fault).

    Raises:
        ValueError: ``rate`` is not in [0, 1).
    """
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"the fault rate must be in [0, 1), got {rate}")
    total = sum(_WEIGHTS.values())
    return {kind: rate * w / total for kind, w in _WEIGHTS.items()}


_WRITES = ("POST", "PUT", "PATCH", "DELETE")
_METADATA_PART = re.compile(rb"\r?\n\r?\n(\{.*?\})\r?\n--", re.S)
"""The JSON metadata part that opens a multipart upload's body (it names the object)."""
_FIRST_BYTES = 4096
"""The part of a request body read before its fault is chosen (what a predicate of
:meth:`FaultProxy.inject` sees of it)."""


@dataclass(frozen=True)
class Request:
    """One HTTP request, read whole."""

    method: str
    target: str
    """Path and query, as sent."""
    headers: Mapping[str, str]
    """Lower-cased names."""
    body: bytes

    @property
    def is_write(self) -> bool:
        return self.method in _WRITES

    @property
    def object_name(self) -> str:
        """The object it is about: from the URL (``/o/<name>``, ``?name=``), or from the JSON
        metadata of a multipart upload's body; "" when it names none (a listing names its prefix)."""
        parts = urlsplit(self.target)
        query = parse_qs(parts.query)
        if "/o/" in parts.path:
            return unquote(parts.path.split("/o/", 1)[1])
        if "name" in query:
            return query["name"][0]
        found = _METADATA_PART.search(self.body) if self.body.startswith(b"--") else None
        if found:
            with contextlib.suppress(ValueError, AttributeError):
                return str(json.loads(found.group(1)).get("name", ""))
        return query.get("prefix", [""])[0]

    def __str__(self) -> str:
        name = self.object_name
        return f"{self.method} {self.target.split('?', 1)[0]}" + (f" ({name})" if name else "")


@dataclass(frozen=True)
class FaultEvent:
    """One fault injected: when (seconds since the proxy started), which, and the request it hit."""

    at: float
    kind: FaultKind
    request: str
    note: str = ""

    def __str__(self) -> str:
        return f"{self.at:9.3f}s {self.kind.value:18s} {self.request}" + (f" [{self.note}]" if self.note else "")


@dataclass
class _Scripted:
    kind: FaultKind
    match: Callable[[Request], bool]
    times: int


class _Closed(Exception):
    """The client closed its connection."""


def _read_head(reader: IO[bytes]) -> tuple[str, list[tuple[str, str]]] | None:
    """(first line, headers) of a message, or None at a clean end of the connection."""
    line = reader.readline(65537)
    while line in (b"\r\n", b"\n"):  # tolerated between messages
        line = reader.readline(65537)
    if not line:
        return None
    headers = []
    while True:
        h = reader.readline(65537)
        if not h:
            raise _Closed
        if h in (b"\r\n", b"\n"):
            break
        name, _, value = h.decode("latin-1").partition(":")
        headers.append((name.strip(), value.strip()))
    return line.decode("latin-1").rstrip("\r\n"), headers


def _read_chunked(reader: IO[bytes]) -> bytes:
    out = bytearray()
    while True:
        size_line = reader.readline(65537)
        if not size_line:
            raise _Closed
        size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while reader.readline(65537) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return bytes(out)
        out += _read_exact(reader, size)
        reader.readline(65537)


def _read_exact(reader: IO[bytes], n: int) -> bytes:
    data = reader.read(n)
    if data is None or len(data) < n:
        raise _Closed
    return data


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP reset (RST), as a dropped connection looks to the peer."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


def _peer_closed(sock: socket.socket) -> bool:
    """True once the peer closed (or reset) its end of ``sock``."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class FaultProxy(LoopbackServer):
    """A loopback proxy to ``target`` (``http://host:port``) that injects faults (see the module docstring).

    Args:
        rates: per kind, the share of requests that get it (:func:`spread_rate` spreads one rate).
        seed: seeds the draws.
        stall_s: how long a stalled request is held (make it longer than the client's timeout).
        retry_after_s: the ``Retry-After`` of the kinds that send one (whole seconds).
        hide_truncation: a cut answer's head gives the cut length (only a hash can tell).
        delay_s: latency added before every request is forwarded (as :class:`testsupport.latency.LatencyProxy`).
    """

    thread_name = "fault-proxy"

    def __init__(self, target: str, *, rates: Mapping[FaultKind, float] | None = None, seed: int = 0,
                 stall_s: float = 5.0, retry_after_s: int = 1, hide_truncation: bool = False, delay_s: float = 0.0,
                 host: str = LOOPBACK):
        self._target = proxy_target(target)
        rates = dict(rates or {})
        if any(r < 0 for r in rates.values()) or sum(rates.values()) >= 1.0:
            raise ValueError(f"fault rates must be >= 0 and sum to less than 1, got {rates}")
        self._target_url = f"http://{self._target[0]}:{self._target[1]}"
        self.rates = rates
        self.stall_s = stall_s
        self.retry_after_s = retry_after_s
        self.hide_truncation = hide_truncation
        self.delay_s = delay_s
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._scripted: list[_Scripted] = []
        self._down: int | None = None
        self._requests = 0
        self._sessions: dict[str, str] = {}  # resumable upload id -> "open" | "finished" | "cancelled"
        self.log: list[FaultEvent] = []
        self._started = time.monotonic()
        self._listen(host, 512)

    # -- control ------------------------------------------------------------------------------
    def inject(self, kind: FaultKind, match: Callable[[Request], bool] = lambda r: True, times: int = 1) -> None:
        """Give the next ``times`` requests that ``match`` accepts the fault ``kind`` (before any drawn one)."""
        with self._lock:
            self._scripted.append(_Scripted(kind, match, times))

    def pending(self) -> int:
        """Scripted faults not injected yet."""
        with self._lock:
            return sum(s.times for s in self._scripted)

    def set_down(self, status: int | None = 503) -> None:
        """Answer every request with ``status`` from now on (None: serve again)."""
        self._down = status

    def count(self) -> int:
        """Requests seen so far."""
        with self._lock:
            return self._requests

    def counts(self) -> Counter:
        """Faults injected so far, by kind (its value, e.g. ``"503-after-write"``)."""
        with self._lock:
            return Counter(e.kind.value for e in self.log)

    def upload_sessions(self) -> Counter:
        """Resumable upload sessions opened through the proxy, by how they stand: ``open`` (never
        finished nor cancelled: left behind), ``finished``, ``cancelled``."""
        with self._lock:
            return Counter(self._sessions.values())

    def _track_session(self, method: str, target: str, status: int, headers: list[tuple[str, str]]) -> None:
        query = parse_qs(urlsplit(target).query)
        if method == "POST" and query.get("uploadType") == ["resumable"] and "upload_id" not in query \
                and status == 200:
            location = parse_qs(urlsplit(_header(headers, "location") or "").query).get("upload_id")
            if location:
                with self._lock:
                    self._sessions[location[0]] = "open"
            return
        if "upload_id" in query:
            ended = "cancelled" if method == "DELETE" else "finished" if status in (200, 201) else None
            if ended is not None:
                with self._lock:
                    self._sessions[query["upload_id"][0]] = ended

    # -- serving ------------------------------------------------------------------------------
    def _choose(self, request: Request) -> FaultKind | None:
        with self._lock:
            self._requests += 1
            for s in self._scripted:
                if s.times > 0 and s.kind.applies_to(request) and s.match(request):
                    s.times -= 1
                    self._scripted = [x for x in self._scripted if x.times > 0]
                    return s.kind
            if not self.rates:
                return None
            u = self._rng.random()
        for kind, share in self.rates.items():
            if u < share:
                return kind if kind.applies_to(request) else None
            u -= share
        return None

    def _note(self, kind: FaultKind, request: Request, note: str = "") -> None:
        with self._lock:
            self.log.append(FaultEvent(time.monotonic() - self._started, kind, str(request), note))

    def _serve(self, client: socket.socket) -> None:
        reader = client.makefile("rb")
        try:
            while not self._closed and self._one(client, reader):
                pass
        except (_Closed, OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(OSError):
                reader.close()
            with contextlib.suppress(OSError):
                client.close()

    def _one(self, client: socket.socket, reader: IO[bytes]) -> bool:
        """Serve one request of the connection; False when the connection is to be closed."""
        head = _read_head(reader)
        if head is None:
            return False
        line, headers = head
        method, target, version = (line.split(" ", 2) + ["", ""])[:3]
        length = int(_header(headers, "content-length") or 0)
        chunked = "chunked" in (_header(headers, "transfer-encoding") or "").lower()
        keep_alive = version.upper() == "HTTP/1.1" and (_header(headers, "connection") or "").lower() != "close"
        lowered = {k.lower(): v for k, v in headers}
        if self._down is not None:
            self._drain(client, reader, headers, length, chunked)
            self._answer(client, self._down, keep_alive=keep_alive)
            return keep_alive
        if (_header(headers, "expect") or "").lower() == "100-continue":
            client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        # The fault is chosen on the head and the body's first bytes (a multipart upload names its
        # object there), so that a reset can come while the rest of the body is still on its way.
        first = _read_chunked(reader) if chunked else _read_exact(reader, min(length, _FIRST_BYTES))
        kind = self._choose(Request(method, target, lowered, first))
        rest = 0 if chunked else length - len(first)
        if kind is FaultKind.RESET_BEFORE_BODY:
            self._note(kind, Request(method, target, lowered, first),
                       f"after {len(first)} of {len(first) + rest} body bytes" if first or rest else "no body")
            _reset(client)
            return False
        request = Request(method, target, lowered, first + (_read_exact(reader, rest) if rest else b""))
        body = request.body
        if kind is FaultKind.RESET_AFTER_BODY:
            self._note(kind, request)
            _reset(client)
            return False
        if kind is not None and kind.status is not None and kind is not FaultKind.UNAVAILABLE_AFTER_WRITE:
            retry_after = kind in (FaultKind.THROTTLED_RETRY_AFTER, FaultKind.UNAVAILABLE_RETRY_AFTER)
            self._note(kind, request)
            self._answer(client, kind.status, keep_alive=keep_alive, retry_after=retry_after)
            return keep_alive
        if kind is FaultKind.STALL:
            waited = self._stall(client)
            if waited is not None:
                self._note(kind, request, f"the client gave up after {waited:.1f}s; not forwarded")
                return False
            self._note(kind, request, f"held {self.stall_s:.1f}s, then forwarded")
        if self.delay_s:
            time.sleep(self.delay_s)
        status, reason, out_headers, out_body = self._forward(method, target, headers, body)
        self._track_session(method, target, status, out_headers)
        if kind is FaultKind.UNAVAILABLE_AFTER_WRITE:
            self._note(kind, request, f"applied: the emulator answered {status}")
            self._answer(client, 503, keep_alive=keep_alive)
            return keep_alive
        if kind is FaultKind.TRUNCATED and len(out_body) >= 2:
            cut = self._rng_cut(len(out_body))
            self._note(kind, request, f"{cut} of {len(out_body)} bytes sent")
            shown = cut if self.hide_truncation else len(out_body)
            client.sendall(self._head(status, reason, out_headers, shown, keep_alive=False) + out_body[:cut])
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_WR)
            return False
        no_body = method == "HEAD" or status in (204, 304) or 100 <= status < 200
        client.sendall(self._head(status, reason, out_headers, len(out_body), keep_alive=keep_alive)
                       + (b"" if no_body else out_body))
        return keep_alive

    def _rng_cut(self, n: int) -> int:
        with self._lock:
            return self._rng.randrange(1, n)

    def _drain(self, client: socket.socket, reader: IO[bytes], headers: list[tuple[str, str]], length: int,
               chunked: bool) -> None:
        if (_header(headers, "expect") or "").lower() == "100-continue":
            client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        if chunked:
            _read_chunked(reader)
        elif length:
            _read_exact(reader, length)

    def _stall(self, client: socket.socket) -> float | None:
        """Hold for ``stall_s``; the seconds waited if the client gave up meanwhile, else None."""
        start = time.monotonic()
        while time.monotonic() - start < self.stall_s:
            if _peer_closed(client):
                return time.monotonic() - start
            time.sleep(0.05)
        return None

    def _answer(self, client: socket.socket, status: int, *, keep_alive: bool, retry_after: bool = False) -> None:
        reason = {429: "Too Many Requests", 503: "Service Unavailable"}.get(status, "Error")
        body = json.dumps({"error": {"code": status, "message": f"{reason} (injected by the fault proxy)"}}).encode()
        headers = [("Content-Type", "application/json; charset=UTF-8")]
        if retry_after:
            headers.append(("Retry-After", str(self.retry_after_s)))
        client.sendall(self._head(status, reason, headers, len(body), keep_alive=keep_alive) + body)

    def _head(self, status: int, reason: str, headers: list[tuple[str, str]], length: int, *, keep_alive: bool) -> bytes:
        lines = [f"HTTP/1.1 {status} {reason}"]
        for k, v in headers:
            if k.lower() in ("content-length", "transfer-encoding", "connection", "keep-alive"):
                continue
            if k.lower() == "location":
                v = v.replace(self._target_url, self.url)
            lines.append(f"{k}: {v}")
        lines.append(f"Content-Length: {length}")
        lines.append("Connection: " + ("keep-alive" if keep_alive else "close"))
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _forward(self, method: str, target: str, headers: list[tuple[str, str]],
                 body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        """Send the request to the emulator on a connection of its own; (status, reason, headers, body)."""
        lines = [f"{method} {target} HTTP/1.1"]
        for k, v in headers:
            if k.lower() in ("content-length", "transfer-encoding", "connection", "expect", "keep-alive"):
                continue
            lines.append(f"{k}: {v}")
        lines += [f"Content-Length: {len(body)}", "Connection: close"]
        with socket.create_connection(self._target, timeout=120) as upstream:
            upstream.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
            reader = upstream.makefile("rb")
            head = _read_head(reader)
            if head is None:
                raise _Closed
            status_line, out_headers = head
            _, status_text, reason = (status_line.split(" ", 2) + ["", ""])[:3]
            status = int(status_text)
            if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
                out = b""
            elif "chunked" in (_header(out_headers, "transfer-encoding") or "").lower():
                out = _read_chunked(reader)
            elif _header(out_headers, "content-length") is not None:
                out = _read_exact(reader, int(_header(out_headers, "content-length") or 0))
            else:
                out = reader.read()
            reader.close()
        return status, reason, out_headers, out


