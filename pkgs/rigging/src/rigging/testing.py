"""Test helpers shared by every package's tests: a real local GCS emulator and fresh store roots.

The root ``conftest.py`` turns these into pytest fixtures (``gcs_emulator``, ``gcs_bucket``,
``memory_prefix``, ``store_url``). Nothing here is imported by library code, and importing it
starts nothing.

The emulator is ``gcp-storage-emulator`` run as a child process on 127.0.0.1. Facts measured
against it (and relied on by the tests):

* gcsfs talks to it when ``STORAGE_EMULATOR_HOST`` is set *before* the ``GCSFileSystem``
  instance is created. Left alone it first tries Google default credentials (a failing
  metadata-server probe, with a warning) and then falls back to anonymous; ``token="anon"``
  (fsspec config, and ``FSSPEC_GS_TOKEN`` for child processes) skips the probe. fsspec caches
  instances, so :func:`use_gcs_emulator` clears that cache when it changes the environment.
* ``import gcsfs`` reads ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT`` (default true) and then makes
  ``gcsfs.GCSFileSystem`` (and fsspec's ``"gs"``) its zonal/HNS subclass, which speaks gRPC and
  hangs against the emulator. Whoever imports gcsfs first decides; so ``rigging.filesystem``
  names ``gcsfs.core.GCSFileSystem`` itself, and :func:`use_gcs_emulator` re-registers it.
* It does **not** enforce generation preconditions: an upload with ``ifGenerationMatch=0`` over
  an existing object succeeds and replaces it. Races that rely on preconditions (create-if-absent,
  lease fencing) can only be proven on the local and ``memory://`` stores.
* Its HTTP server is single-threaded and closes every connection (HTTP/1.0), so requests from
  many processes are served one at a time, never deadlocked by keep-alive.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from rigging.environ import updated_environ

__all__ = [
    "GcsEmulator",
    "LatencyProxy",
    "emulator_env",
    "free_port",
    "new_bucket_name",
    "new_memory_prefix",
    "start_gcs_emulator",
    "use_gcs_emulator",
]

_HOST = "127.0.0.1"


def free_port(host: str = _HOST) -> int:
    """A TCP port that was free a moment ago (the caller must still handle losing a race for it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def new_bucket_name() -> str:
    """A fresh, valid GCS bucket name."""
    return f"test-{uuid.uuid4().hex[:20]}"


def new_memory_prefix() -> str:
    """A fresh ``memory://`` root that no other test uses."""
    return f"memory://test-{uuid.uuid4().hex}"


def emulator_env(url: str) -> dict[str, str]:
    """The environment that points gcsfs and TensorStore at the emulator at ``url``."""
    return {
        "STORAGE_EMULATOR_HOST": url,
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        "TENSORSTORE_GCS_HTTP_URL": url,
        # Anonymous access; without it gcsfs first probes for Google credentials (a metadata
        # server request that fails here) before falling back to anonymous. fsspec reads
        # FSSPEC_GS_TOKEN when imported, so child processes get it too.
        "FSSPEC_GS_TOKEN": "anon",
    }


def _emulator_command() -> list[str]:
    # Prefer the script next to this interpreter (the project's venv), then PATH.
    beside = Path(sys.executable).with_name("gcp-storage-emulator")
    exe = str(beside) if beside.exists() else shutil.which("gcp-storage-emulator")
    if exe is None:
        raise RuntimeError(
            "gcp-storage-emulator is not installed; install the workspace's dev group (uv sync)"
        )
    return [exe]


@dataclass
class GcsEmulator:
    """A running ``gcp-storage-emulator`` child process serving ``url``."""

    host: str
    port: int
    process: subprocess.Popen = field(repr=False)
    log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh name by default) and return ``gs://<name>``."""
        name = name or new_bucket_name()
        body = json.dumps({"name": name}).encode()
        request = urllib.request.Request(
            f"{self.url}/storage/v1/b?project=test",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            if response.status != 200:
                raise RuntimeError(f"emulator refused bucket {name!r}: HTTP {response.status}")
        return f"gs://{name}"

    def alive(self) -> bool:
        return self.process.poll() is None

    def stderr(self) -> str:
        """What the emulator has written to its stderr so far."""
        if self.log is None or self.log.closed:
            return ""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self) -> None:
        """Stop the emulator (SIGTERM, then SIGKILL after 5 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        if self.log is not None:
            self.log.close()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/", timeout=1) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


# The in-memory emulator re-serialises the metadata of every object into a ``.meta`` snapshot on
# each write (O(objects) per write), which it reads back only when it starts; in memory nothing
# ever reads it. Without the snapshot, filling a bucket with thousands of objects is linear.
_NO_SNAPSHOT_LAUNCHER = (
    "import sys; import gcp_storage_emulator.storage as s; "
    "s.Storage._write_config_to_file = lambda self: None; "
    "from gcp_storage_emulator.__main__ import main; sys.exit(main(sys.argv[1:]))"
)


def start_gcs_emulator(host: str = _HOST, *, timeout: float = 30.0, attempts: int = 3,
                       linear_writes: bool = False) -> GcsEmulator:
    """Start an in-memory emulator on a free port of ``host`` and wait until it answers.

    Args:
        linear_writes: skip the emulator's per-write metadata snapshot (see
            ``_NO_SNAPSHOT_LAUNCHER``), for benchmarks that fill a bucket with thousands of objects.

    Raises:
        RuntimeError: it exited or did not answer within ``timeout`` seconds on every attempt.
    """
    errors = []
    for _ in range(attempts):
        port = free_port(host)
        launcher = [sys.executable, "-c", _NO_SNAPSHOT_LAUNCHER] if linear_writes else _emulator_command()
        cmd = [*launcher, "start", "--host", host, "--port", str(port), "--in-memory", "-q"]
        # Its stderr goes to a file, never to a pipe: the server prints a traceback for every
        # connection a client drops mid-request (a killed writer), and once a pipe nobody reads
        # is full, the single-threaded server blocks on that print and answers no one again.
        log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by GcsEmulator.stop()
        process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
        emulator = GcsEmulator(host=host, port=port, process=process, log=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not emulator.alive():
                # Most likely another process took the port between free_port() and bind().
                stderr = emulator.stderr()
                emulator.stop()
                errors.append(f"port {port}: exited with {process.returncode}: {stderr.strip()[-500:]}")
                break
            if _healthy(emulator.url):
                return emulator
            time.sleep(0.05)
        else:
            emulator.stop()
            errors.append(f"port {port}: no answer within {timeout} s")
    raise RuntimeError("could not start gcp-storage-emulator: " + "; ".join(errors))


def _clear_gcsfs_instances() -> None:
    from gcsfs.core import GCSFileSystem

    # Subclasses (gcsfs's zonal/HNS one) keep their own instance caches.
    for cls in (GCSFileSystem, *GCSFileSystem.__subclasses__()):
        cls.clear_instance_cache()


@contextlib.contextmanager
def use_gcs_emulator(url: str) -> Iterator[None]:
    """Point gcsfs (and child processes, and TensorStore) at the emulator at ``url`` for a while.

    Sets :func:`emulator_env` in ``os.environ`` and drops cached ``GCSFileSystem`` instances on
    entry and exit, so ``fsspec.filesystem("gs")`` builds a fresh one that reads the variables.
    """
    import fsspec
    import fsspec.config
    from fsspec.registry import _registry  # fsspec.registry, the attribute, is a read-only view

    saved_conf = fsspec.config.conf.get("gs")
    saved_registry = {p: _registry.get(p) for p in ("gs", "gcs")}
    with updated_environ(emulator_env(url)):
        fsspec.config.conf["gs"] = {**(saved_conf or {}), "token": "anon"}
        # If gcsfs was imported before GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false was set, fsspec's
        # "gs" names gcsfs's zonal/HNS subclass, which speaks gRPC and hangs against the emulator.
        from gcsfs.core import GCSFileSystem

        for proto in saved_registry:
            fsspec.register_implementation(proto, GCSFileSystem, clobber=True)
        _clear_gcsfs_instances()
        try:
            yield
        finally:
            for proto, cls in saved_registry.items():
                if cls is None:
                    _registry.pop(proto, None)  # back to resolving it lazily
                else:
                    fsspec.register_implementation(proto, cls, clobber=True)
            if saved_conf is None:
                fsspec.config.conf.pop("gs", None)
            else:
                fsspec.config.conf["gs"] = saved_conf
            _clear_gcsfs_instances()


_HTTP_METHODS = (b"GET ", b"POST ", b"PUT ", b"PATCH ", b"DELETE ", b"HEAD ")


class LatencyProxy:
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

    def __init__(self, target: str, delay_s: float = 0.0, host: str = _HOST):
        import threading
        from urllib.parse import urlsplit

        parts = urlsplit(target)
        if not parts.hostname or not parts.port:
            raise ValueError(f"proxy target must be http://host:port, got {target!r}")
        if delay_s < 0:
            raise ValueError(f"delay_s must be >= 0, got {delay_s}")
        self._target = (parts.hostname, parts.port)
        self.delay_s = delay_s
        self._lock = threading.Lock()
        self.requests: list[str] = []  # "METHOD path" of every request seen, in arrival order
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind((host, 0))
        self._server.listen(256)
        self.host, self.port = host, int(self._server.getsockname()[1])
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True, name="latency-proxy")
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def count(self) -> int:
        """Requests seen so far."""
        with self._lock:
            return len(self.requests)

    def reset(self) -> list[str]:
        """Forget the requests seen so far; returns them."""
        with self._lock:
            seen, self.requests = self.requests, []
        return seen

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._server.close()

    def __enter__(self) -> LatencyProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        import threading

        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _note(self, chunk: bytes) -> None:
        if chunk.startswith(_HTTP_METHODS):
            line = chunk.split(b"\r\n", 1)[0].decode("latin-1").rsplit(" ", 1)[0]
            with self._lock:
                self.requests.append(line)

    def _serve(self, client: socket.socket) -> None:
        import threading

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
