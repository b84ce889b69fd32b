"""Test fixtures: a real Ray head on 127.0.0.1 for one test session, and a client connected to it.

Use from any package's tests with ``pytest_plugins = ["fray.testing"]`` in a ``conftest.py``, or
import :func:`ray_head` directly.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest

from fray.ray_client import RayClient

__all__ = ["free_port", "ray_client", "ray_cluster", "ray_head"]

_START_TIMEOUT_S = 90.0


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _reachable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


@contextlib.contextmanager
def ray_head(num_cpus: int = 2, host: str = "127.0.0.1") -> Iterator[str]:
    """Start a Ray head (``ray start --head --block``) of its own and yield its address.

    Every fixed port Ray would otherwise use is replaced by a free one and the temporary folder is
    private, so concurrent sessions on one machine do not collide. The head is stopped (its whole
    process group) on exit; ``ray stop`` is never used since it would stop other users' clusters.

    Token authentication is off for the head and, while it runs, for clients in this process
    (``RAY_AUTH_MODE=disabled``): otherwise a token left in ``~/.ray/auth_token`` by some earlier
    local ``ray.init()`` turns it on for one side only and the client cannot connect.
    """
    port = free_port(host)
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray puts unix sockets in it
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    command = [
        ray_bin, "start", "--head", "--block", "--disable-usage-stats",
        f"--node-ip-address={host}", f"--port={port}", f"--num-cpus={num_cpus}", "--num-gpus=0",
        "--include-dashboard=false", f"--temp-dir={temp_dir}",
        f"--ray-client-server-port={free_port(host)}",
        f"--dashboard-agent-listen-port={free_port(host)}",
        f"--dashboard-agent-grpc-port={free_port(host)}",
        f"--runtime-env-agent-port={free_port(host)}",
        f"--metrics-export-port={free_port(host)}",
    ]
    log = open(os.path.join(temp_dir, "ray-start.log"), "w+b")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
           "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    env.pop("RAY_ADDRESS", None)
    previous_auth_mode = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not _reachable(host, port):
            if process.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(
                    f"ray head did not start on {host}:{port}: {log.read().decode(errors='replace')[-3000:]}"
                )
            time.sleep(0.2)
        yield f"{host}:{port}"
    finally:
        if previous_auth_mode is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = previous_auth_mode
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """The address of a 2-CPU Ray head on 127.0.0.1, started once per test session."""
    with ray_head(num_cpus=2) as address:
        yield address


@pytest.fixture(scope="session")
def ray_client(ray_cluster: str) -> Iterator[RayClient]:
    """A :class:`RayClient` connected to :func:`ray_cluster` by its address."""
    client = RayClient(address=ray_cluster)
    try:
        yield client
    finally:
        client.shutdown()
