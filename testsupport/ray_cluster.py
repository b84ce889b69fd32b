"""Test fixtures: a real Ray head on 127.0.0.1 for one test session, and a client connected to it.

The workspace's root ``conftest.py`` defines the fixtures, once: every conftest or module that
imports them defines another fixture, and so starts another head. Under ``pytest -n`` the tests that
use the head are one xdist group (:data:`RAY_HEAD_GROUP`), sent to one worker together, and the
conftest stops the head after the group's last test (:func:`stop_session_head`) rather than leaving
it running, idle, until the session ends. :func:`ray_head` starts a head of its own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import psutil
import pytest

from fray.ray_client import RayClient
from rigging.environ import updated_environ
from testsupport.net import LOOPBACK, free_port, reachable

__all__ = ["NODE_ENV", "RAY_HEAD_GROUP", "MultiNodeCluster", "ray_client", "ray_cluster", "ray_head", "ray_multinode",
           "require_session_head", "stop_session_head"]

_START_TIMEOUT_S = 90.0
_LOG_MONITOR = False
"""``include_log_monitor`` of every node started here, off: no driver of the suite reads worker output
through Ray (fray's client and the tests connect with ``log_to_driver=False``; a step's output
reaches its log by fray's own means), so a node's log monitor would only poll every log file of
the node for nothing, a process of its own (seen at 5% of a core)."""

_RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
"""The environment of every head and node started here: no usage reports, no token authentication
(see :func:`ray_head`), no ``uv run`` runtime environment for its workers."""

RAY_HEAD_GROUP = "ray-head"
"""The xdist group of every test that uses :func:`ray_cluster` (the root ``conftest.py`` assigns it):
under ``pytest -n`` one worker runs them all, so the session starts one head, not one per worker."""


@dataclass
class _Head:
    process: subprocess.Popen[bytes]
    temp_dir: str
    log: Any
    address: str

    def stop(self) -> None:
        # ``ray start --block`` stops its cluster and exits on SIGINT (in well under a second) but not
        # on SIGTERM (it waited out every timeout); then the whole process group is killed, for
        # anything left. ``ray stop`` is never used since it would stop other users' clusters.
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=5)
        self.log.close()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _start_head(num_cpus: int, host: str) -> _Head:
    # One attempt: a head on fresh ports that answers on its GCS port, or RuntimeError with its log.
    port = free_port(host)
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray puts unix sockets in it
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    command = [
        ray_bin, "start", "--head", "--block", "--disable-usage-stats",
        f"--node-ip-address={host}", f"--port={port}", f"--num-cpus={num_cpus}", "--num-gpus=0",
        "--include-dashboard=false", f"--include-log-monitor={str(_LOG_MONITOR).lower()}",
        f"--temp-dir={temp_dir}",
        f"--ray-client-server-port={free_port(host)}",
        f"--dashboard-agent-listen-port={free_port(host)}",
        f"--dashboard-agent-grpc-port={free_port(host)}",
        f"--runtime-env-agent-port={free_port(host)}",
        f"--metrics-export-port={free_port(host)}",
    ]
    log = open(os.path.join(temp_dir, "ray-start.log"), "w+b")  # noqa: SIM115 - closed by _Head.stop()
    env = {**os.environ, **_RAY_ENV}
    env.pop("RAY_ADDRESS", None)
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    head = _Head(process=process, temp_dir=temp_dir, log=log, address=f"{host}:{port}")
    deadline = time.monotonic() + _START_TIMEOUT_S
    while not reachable(host, port):
        if process.poll() is not None or time.monotonic() > deadline:
            log.seek(0)
            message = f"ray head did not start on {host}:{port}: {log.read().decode(errors='replace')[-3000:]}"
            head.stop()
            raise RuntimeError(message)
        time.sleep(0.2)
    return head


@contextlib.contextmanager
def ray_head(num_cpus: int = 2, host: str = LOOPBACK, attempts: int = 3) -> Iterator[str]:
    """Start a Ray head (``ray start --head --block``) of its own and yield its address.

    Every fixed port Ray would otherwise use is replaced by a free one and the temporary folder is
    private, so concurrent sessions on one machine do not collide. A head that fails to start (most
    likely another process took one of its ports first) is tried again on new ports, ``attempts``
    times in all. The head is stopped (its whole process group) on exit.

    Token authentication is off for the head and, while it runs, for clients in this process
    (``RAY_AUTH_MODE=disabled``): otherwise a token left in ``~/.ray/auth_token`` by some earlier
    local ``ray.init()`` turns it on for one side only and the client cannot connect.
    """
    with updated_environ({"RAY_AUTH_MODE": "disabled"}):
        errors: list[str] = []
        head = None
        while head is None:
            try:
                head = _start_head(num_cpus, host)
            except RuntimeError as e:
                errors.append(str(e))
                if len(errors) >= attempts:
                    raise RuntimeError(f"{attempts} tries: " + "\n---\n".join(errors)) from None
        try:
            yield head.address
        finally:
            head.stop()


NODE_ENV = "FRAY_TEST_NODE"
"""Set on every process of a :func:`ray_multinode` node to that node's name."""


def _node_ports() -> dict[str, Any]:
    # Every port a node would otherwise take from a fixed default, so that concurrent clusters on
    # one machine (and the nodes of one cluster) never collide.
    return {"ray_client_server_port": free_port(), "dashboard_agent_listen_port": free_port(),
            "metrics_agent_port": free_port(), "metrics_export_port": free_port(),
            "runtime_env_agent_port": free_port()}


@dataclass
class MultiNodeCluster:
    """Several raylets on this machine (``ray.cluster_utils.Cluster``), each with its own resources.

    Attributes:
        address: the GCS address to connect to (``RayClient(address=...)``).
        nodes: the worker nodes by name; each node's processes see ``FRAY_TEST_NODE=<name>``.
    """

    cluster: Any
    address: str
    nodes: dict[str, Any] = field(default_factory=dict)

    def remove(self, name: str) -> None:
        """Kill every process of the node ``name`` (as a lost host)."""
        self.cluster.remove_node(self.nodes.pop(name), allow_graceful=False)


def _start_multinode(nodes: Mapping[str, Mapping[str, Any]], temp_dir: str) -> MultiNodeCluster:
    # One attempt: every node registered with the GCS, or the exception Ray raised (the cluster,
    # whatever part of it started, is shut down first).
    from ray.cluster_utils import Cluster  # Ray is imported only by the tests that start a cluster

    cluster = Cluster(initialize_head=False)
    before = {p.pid for p in psutil.Process().children()}
    try:
        cluster.add_node(num_cpus=0, gcs_server_port=free_port(), include_dashboard=False, temp_dir=temp_dir,
                         include_log_monitor=_LOG_MONITOR, **_node_ports())
        if cluster.address is None:
            raise RuntimeError("the Ray test cluster's head started without an address")
        out = MultiNodeCluster(cluster=cluster, address=cluster.address)
        for name, args in nodes.items():
            out.nodes[name] = cluster.add_node(env_vars={NODE_ENV: name}, include_log_monitor=_LOG_MONITOR,
                                               **_node_ports(), **dict(args))
        cluster.wait_for_nodes()
        return out
    except BaseException:
        cluster.shutdown()
        # A node that missed its deadline is not in ``cluster``: its processes are children of this
        # one that were not there before, stopped here by their exact ids.
        for child in psutil.Process().children():
            if child.pid not in before:
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()
        raise


@contextlib.contextmanager
def ray_multinode(nodes: Mapping[str, Mapping[str, Any]], attempts: int = 3) -> Iterator[MultiNodeCluster]:
    """A head with no CPUs (nothing is scheduled there) and one worker node per entry of ``nodes``
    (``{"a": {"num_cpus": 1}, ...}``: keyword arguments of ``Cluster.add_node``).

    The temporary folder (and Ray's "current cluster" address file) is private: other clusters on
    the machine are neither found nor disturbed. Token authentication is off as for
    :func:`ray_head`. Ray gives a raylet a fixed 30 s to register with the GCS, which two busy
    cores can miss; a cluster that fails to start is shut down and started again on new ports,
    ``attempts`` times in all.
    """
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    os.makedirs(os.path.join(temp_dir, "ray"))
    with updated_environ({"RAY_TMPDIR": temp_dir, **_RAY_ENV}):
        try:
            errors: list[str] = []
            out = None
            while out is None:
                try:
                    out = _start_multinode(nodes, temp_dir)
                except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception when a raylet misses its deadline
                    errors.append(f"{type(e).__name__}: {e}")
                    if len(errors) >= attempts:
                        raise RuntimeError(f"the Ray test cluster did not start in {attempts} tries: "
                                           + " | ".join(errors)) from None
            try:
                yield out
            finally:
                out.cluster.shutdown()
        finally:
            shutil.rmtree(temp_dir, ignore_errors=True)


class _SessionHead:
    """The session's head and what is connected to it, stopped together (at most once)."""

    def __init__(self) -> None:
        self._stack: contextlib.ExitStack | None = None
        self.stopped = False

    def require_not_stopped(self) -> None:
        if self.stopped:
            raise RuntimeError("the session's Ray head was stopped after the last test of its xdist group "
                               f"({RAY_HEAD_GROUP!r}); a test that uses it ran outside that group")

    def start(self) -> str:
        self.require_not_stopped()
        self._stack = contextlib.ExitStack()
        address = self._stack.enter_context(ray_head(num_cpus=2))
        # Callbacks run last-in first-out: clients (on_stop) first, then this, then the head stops.
        self._stack.callback(_disconnect_ray)
        return address

    def on_stop(self, callback: Any) -> None:
        assert self._stack is not None, "the session's Ray head is not running"
        self._stack.callback(callback)

    def stop(self) -> None:
        """Disconnect this process (clients first, then any other ``ray.init`` left open: a driver
        whose head is gone would be ended by Ray) and stop the head."""
        if self._stack is None:
            return
        stack, self._stack = self._stack, None
        self.stopped = True
        stack.close()


def _disconnect_ray() -> None:
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


_SESSION = _SessionHead()


def stop_session_head() -> None:
    """Stop the session's head (and disconnect from it) now, if it runs: its tests are done."""
    _SESSION.stop()


def require_session_head() -> None:
    """Fail (one line) if the session's head was already stopped by :func:`stop_session_head`."""
    _SESSION.require_not_stopped()


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """The address of a 2-CPU Ray head on 127.0.0.1, started once per test session."""
    address = _SESSION.start()
    try:
        yield address
    finally:
        _SESSION.stop()


@pytest.fixture(scope="session")
def ray_client(ray_cluster: str) -> Iterator[RayClient]:
    """A :class:`RayClient` connected to :func:`ray_cluster` by its address (shut down with it)."""
    client = RayClient(address=ray_cluster)
    _SESSION.on_stop(client.shutdown)
    yield client
