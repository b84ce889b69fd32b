"""Test fixtures: a real Ray head on this machine for one test session, and a client connected to it.

The workspace's root ``conftest.py`` defines the fixtures, once: every conftest or module that
imports them defines another fixture, and so starts another head. Under ``pytest -n`` the tests that
use the head are one xdist group (:data:`RAY_HEAD_GROUP`), sent to one worker together, and the
conftest stops the head after the group's last test (:func:`stop_session_head`) rather than leaving
it running, idle, until the session ends. :func:`ray_head` starts a head of its own.

Every head and node is started in this process by ``ray.cluster_utils.Cluster`` (no ``ray start``:
that is a process of its own importing all of Ray, and it starts a Ray Client server and the
autoscaler's monitor, two more Python processes, about two CPU seconds to start and polling
after, which no test uses: :data:`_HEAD_ARGS`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import psutil
import pytest

from fray.ray_client import RayClient
from rigging.environ import updated_environ
from testsupport.net import free_port

__all__ = ["NODE_ENV", "RAY_HEAD_GROUP", "MultiNodeCluster", "ray_client", "ray_cluster", "ray_head", "ray_multinode",
           "require_session_head", "stop_session_head"]

_HEAD_ARGS: dict[str, Any] = {"include_dashboard": False, "include_log_monitor": False, "no_monitor": True}
"""What every head started here leaves out: the dashboard's modules, the log monitor (no driver of the
suite reads worker output through Ray: fray's client and the tests connect with
``log_to_driver=False``, and a step's output reaches its log by fray's own means, so it would only
poll every log file of the node, seen at 5% of a core) and the autoscaler's monitor (nothing here
scales). No ``ray_client_server_port`` is given, so no Ray Client server starts either (every
driver connects to the GCS)."""

RAY_HEAD_GROUP = "ray-head"
"""The xdist group of every test that uses :func:`ray_cluster` (the root ``conftest.py`` assigns it):
under ``pytest -n`` one worker runs them all, so the session starts one head, not one per worker."""

NODE_ENV = "FRAY_TEST_NODE"
"""Set on every process of a :func:`ray_multinode` node to that node's name."""


def _node_ports() -> dict[str, Any]:
    # Every port a node would otherwise take from a fixed default, so that concurrent clusters on
    # one machine (and the nodes of one cluster) never collide.
    return {"dashboard_agent_listen_port": free_port(), "metrics_agent_port": free_port(),
            "metrics_export_port": free_port(), "runtime_env_agent_port": free_port()}


@dataclass
class MultiNodeCluster:
    """A head and raylets on this machine (``ray.cluster_utils.Cluster``), each with its own resources.

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


def _start_cluster(head: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]], temp_dir: str,
                   fate_shared: bool) -> MultiNodeCluster:
    # One attempt: every node registered with the GCS, or the exception Ray raised (the cluster,
    # whatever part of it started, is shut down first).
    from ray.cluster_utils import Cluster  # Ray is imported only by the tests that start a cluster

    cluster = Cluster(initialize_head=False, shutdown_at_exit=fate_shared)
    before = {p.pid for p in psutil.Process().children()}
    try:
        cluster.add_node(gcs_server_port=free_port(), temp_dir=temp_dir, **_HEAD_ARGS, **_node_ports(), **dict(head))
        if cluster.address is None:
            raise RuntimeError("the Ray test cluster's head started without an address")
        out = MultiNodeCluster(cluster=cluster, address=cluster.address)
        for name, args in nodes.items():
            out.nodes[name] = cluster.add_node(env_vars={NODE_ENV: name}, include_log_monitor=False,
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
def ray_multinode(nodes: Mapping[str, Mapping[str, Any]], attempts: int = 3,
                  head: Mapping[str, Any] | None = None, fate_shared: bool = True) -> Iterator[MultiNodeCluster]:
    """A head (``head``: keyword arguments of ``Cluster.add_node``; by default no CPUs, so nothing is
    scheduled there) and one worker node per entry of ``nodes`` (``{"a": {"num_cpus": 1}, ...}``).

    ``fate_shared``: Ray's own guard, which ends the cluster's processes when this one dies however
    it dies; it also makes this process the leader of a process group of its own (so a terminal's
    Ctrl-C no longer reaches a ``pytest -n 0`` run), so the session's head goes without it.

    The temporary folder (and Ray's "current cluster" address file) is private: other clusters on
    the machine are neither found nor disturbed. Token authentication is off for the cluster and,
    while it runs, for clients in this process (``RAY_AUTH_MODE=disabled``): otherwise a token left
    in ``~/.ray/auth_token`` by some earlier local ``ray.init()`` turns it on for one side only and
    the client cannot connect. Ray gives a raylet a fixed 30 s to register with the GCS, which two
    busy cores can miss; a cluster that fails to start (or another process took one of its ports
    first) is shut down and started again on new ports, ``attempts`` times in all. Every process of
    the cluster is stopped on exit.
    """
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray puts unix sockets in it
    os.makedirs(os.path.join(temp_dir, "ray"))
    with updated_environ({"RAY_TMPDIR": temp_dir, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
                          "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}):
        try:
            errors: list[str] = []
            out = None
            while out is None:
                try:
                    out = _start_cluster(head if head is not None else {"num_cpus": 0}, nodes, temp_dir, fate_shared)
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


@contextlib.contextmanager
def ray_head(num_cpus: int = 2, attempts: int = 3) -> Iterator[str]:
    """Start a Ray head of its own, with ``num_cpus`` CPUs and no other node, and yield its address
    (as :func:`ray_multinode`: private folder, fresh ports, tried ``attempts`` times, stopped on exit)."""
    with ray_multinode({}, attempts=attempts, head={"num_cpus": num_cpus}, fate_shared=False) as cluster:
        yield cluster.address


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
    """The address of a 2-CPU Ray head on this machine, started once per test session."""
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
