"""The soak's runners on the nodes of a local multi-node Ray cluster (``--nodes N``).

The cluster is the one the Ray tests start (:func:`testsupport.ray_cluster.ray_multinode`): a head
with nothing to run and ``N`` worker nodes, each a raylet of its own. A runner placed on a node is
started by a Ray task pinned there (node affinity, not soft), as a child
of that node's worker process (its warm template and step processes under it, on that node), so
that racing runners on different nodes build through the same store. The task hands back the
runner's pid: the soak kills and freezes it, and everything under it, as it does a runner it
started itself (:class:`NodeProcess` answers as ``subprocess.Popen`` does).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["NodeProcess", "SoakNodes", "soak_nodes"]


def launch(command: list[str], env: Mapping[str, str], cwd: str, output: str, pid_file: str) -> int:
    """Body of the Ray task: start ``command`` on this node, say its pid, wait for it; its exit code."""
    with open(output, "ab") as out:
        proc = subprocess.Popen(command, cwd=cwd, env=dict(env), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    tmp = f"{pid_file}.tmp"
    Path(tmp).write_text(str(proc.pid))
    os.replace(tmp, pid_file)
    return proc.wait()


class NodeProcess:
    """A runner started on a node, seen from the soak as a ``subprocess.Popen``: its pid, its exit code."""

    def __init__(self, ray: Any, ref: Any, pid: int, node: str):
        self._ray = ray
        self._ref = ref
        self.pid = pid
        self.node = node
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            ready, _ = self._ray.wait([self._ref], timeout=0)
            if ready:
                self.returncode = int(self._ray.get(self._ref))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                self.returncode = int(self._ray.get(self._ref, timeout=timeout))
            except self._ray.exceptions.GetTimeoutError:
                raise subprocess.TimeoutExpired(f"runner {self.pid} on node {self.node}", timeout or 0) from None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class SoakNodes:
    """Starts processes on the nodes of a running cluster that this process is connected to.

    Args:
        node_ids: the Ray node id of each node, by name (``MultiNodeCluster.nodes[name].node_id``).
        tmp: a folder of this machine where the started processes' pids are handed over.
    """

    def __init__(self, ray: Any, node_ids: Mapping[str, str], tmp: Path):
        self._ray = ray
        self._node_ids = dict(node_ids)
        self.names = sorted(node_ids)
        self._tmp = tmp
        self._launch = ray.remote(launch)
        self._count = 0

    def start(self, node: str, command: list[str], env: Mapping[str, str], cwd: str, output: Path,
              timeout: float = 120.0) -> NodeProcess:
        """Start ``command`` on ``node``; returns once it runs (its pid known)."""
        self._count += 1
        pid_file = self._tmp / f"runner-{self._count}.pid"
        output.parent.mkdir(parents=True, exist_ok=True)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # Ray: only with nodes

        there = NodeAffinitySchedulingStrategy(node_id=self._node_ids[node], soft=False)
        options: dict[str, Any] = {"num_cpus": 0, "max_retries": 0, "scheduling_strategy": there}
        ref = self._launch.options(**options).remote(command, dict(env), cwd, str(output), str(pid_file))
        deadline = time.monotonic() + timeout
        while not pid_file.exists():
            ready, _ = self._ray.wait([ref], timeout=0.05)
            if ready and not pid_file.exists():  # (a quick process may have ended since the look above)
                self._ray.get(ref)  # raises what the task raised
                raise RuntimeError(f"the process on node {node} ended before it said its pid")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no runner started on node {node} within {timeout:.0f}s")
        return NodeProcess(self._ray, ref, int(pid_file.read_text()), node)


@contextlib.contextmanager
def soak_nodes(count: int, workdir: Path, pythonpath: str) -> Iterator[SoakNodes]:
    """A local Ray cluster of ``count`` nodes (named ``a``, ``b``, ...) that runs the soak's runners."""
    from rigging.environ import updated_environ
    from testsupport.ray_cluster import ray_multinode

    names = [chr(ord("a") + i) for i in range(count)]
    tmp = workdir / "nodes"
    tmp.mkdir(exist_ok=True)
    # The nodes' worker processes import this module (the task's function) from the workspace.
    with updated_environ({"PYTHONPATH": pythonpath}), ray_multinode({n: {"num_cpus": 1} for n in names}) as cluster:
        import ray

        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            yield SoakNodes(ray, {n: cluster.nodes[n].node_id for n in names}, tmp)
        finally:
            ray.shutdown()
