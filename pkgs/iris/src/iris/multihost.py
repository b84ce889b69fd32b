"""Multi-host jobs: one process per host, joined into one JAX job by ``jax.distributed``.

The launcher gives every process the same coordinator address (process 0's host and a free port),
the number of processes and its own index, in the environment. In the process,
:func:`initialize_jax` reads them and calls ``jax.distributed.initialize``. On Ray the processes go
into a placement group with one bundle per host; locally (for tests) they are N local processes.
"""

from __future__ import annotations

import enum
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fray.cluster import DistributedClient, JobFailed, JobHandle, LocalClient, RayClient
from iris.cluster import ResourceConfig

__all__ = [
    "COORDINATOR_ENV",
    "NUM_PROCESSES_ENV",
    "PROCESS_ID_ENV",
    "MultihostEnv",
    "MultihostJob",
    "MultihostJobHandle",
    "PlacementStrategy",
    "initialize_jax",
    "launch",
    "launch_local",
    "launch_ray",
]

COORDINATOR_ENV = "JAX_COORDINATOR_ADDRESS"  # also read by jax.distributed.initialize itself
NUM_PROCESSES_ENV = "IRIS_NUM_PROCESSES"
PROCESS_ID_ENV = "IRIS_PROCESS_ID"


@dataclass(frozen=True)
class MultihostEnv:
    """Where one process stands in a multi-host job.

    Attributes:
        coordinator_address: ``host:port`` of process 0's coordinator service.
        num_processes: how many processes the job has.
        process_id: this process's index, 0-based.
    """

    coordinator_address: str
    num_processes: int
    process_id: int

    def __post_init__(self) -> None:
        if self.num_processes < 1:
            raise ValueError(f"num_processes must be >= 1, got {self.num_processes!r}")
        if not 0 <= self.process_id < self.num_processes:
            raise ValueError(f"process_id must be in [0, {self.num_processes}), got {self.process_id!r}")
        if ":" not in self.coordinator_address:
            raise ValueError(f"coordinator_address must be host:port, got {self.coordinator_address!r}")

    def to_env(self) -> dict[str, str]:
        return {
            COORDINATOR_ENV: self.coordinator_address,
            NUM_PROCESSES_ENV: str(self.num_processes),
            PROCESS_ID_ENV: str(self.process_id),
        }

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> MultihostEnv | None:
        """Read the variables a launcher set; None when this process was not launched as one of many."""
        environ = os.environ if environ is None else environ
        if NUM_PROCESSES_ENV not in environ:
            return None
        return cls(environ[COORDINATOR_ENV], int(environ[NUM_PROCESSES_ENV]), int(environ[PROCESS_ID_ENV]))


def initialize_jax(environ: Mapping[str, str] | None = None) -> MultihostEnv | None:
    """Join this process into its multi-host JAX job; a no-op (None) for a single-process job."""
    spec = MultihostEnv.from_env(environ)
    if spec is None:
        return None
    import jax

    jax.distributed.initialize(
        coordinator_address=spec.coordinator_address,
        num_processes=spec.num_processes,
        process_id=spec.process_id,
    )
    return spec


class PlacementStrategy(enum.Enum):
    """How a Ray placement group spreads a job's processes."""

    STRICT_SPREAD = "STRICT_SPREAD"  # one per host: what a real multi-host slice needs
    SPREAD = "SPREAD"
    PACK = "PACK"  # all on as few nodes as possible: single-node test clusters


class MultihostJob:
    """The processes of one multi-host job, seen as one job."""

    def __init__(self, name: str, handles: list[JobHandle], on_finish: Callable[[], None] | None = None):
        self.name = name
        self.handles = handles
        self._on_finish = on_finish

    def done(self) -> bool:
        return all(h.done() for h in self.handles)

    def result(self, timeout: float | None = None, poll_interval: float = 0.1) -> list[Any]:
        """Every process's return value, in process order.

        If one process fails the others are cancelled (they would wait forever in a collective)
        and its error is raised, naming the process.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while not self.done():
                for i, h in enumerate(self.handles):
                    if h.done():
                        try:
                            h.result(timeout=0)
                        except JobFailed as e:
                            self.cancel()
                            raise JobFailed(f"{self.name}: process {i} failed: {e}",
                                            remote_traceback=e.remote_traceback, exitcode=e.exitcode,
                                            worker_lost=e.worker_lost) from None
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"{self.name} did not finish within {timeout}s")
                time.sleep(poll_interval)
            values = []
            for i, h in enumerate(self.handles):
                try:
                    values.append(h.result(timeout=0))
                except JobFailed as e:
                    raise JobFailed(f"{self.name}: process {i} failed: {e}",
                                    remote_traceback=e.remote_traceback, exitcode=e.exitcode,
                                    worker_lost=e.worker_lost) from None
            return values
        finally:
            if self.done():
                self._finish()

    def cancel(self, grace_s: float | None = None) -> None:
        for h in self.handles:
            h.cancel(grace_s)
        self._finish()

    def logs(self) -> list[str]:
        """Each process's output, in process order."""
        return [h.logs() for h in self.handles]

    def _finish(self) -> None:
        if self._on_finish is not None:
            on_finish, self._on_finish = self._on_finish, None
            on_finish()


class MultihostJobHandle(JobHandle):
    """A :class:`MultihostJob` behind the one-job handle interface: done when every process is, or
    as soon as one has failed (the rest would wait forever); ``logs`` joins the processes' output.
    """

    def __init__(self, job: MultihostJob):
        self._job = job
        self.handles = job.handles
        self.name = job.name
        self._outcome: tuple[Any, BaseException | None] | None = None  # (result, error)

    def _one_failed(self) -> bool:
        for h in self.handles:
            if h.done():
                try:
                    h.result(timeout=0)
                except BaseException:  # noqa: BLE001 - a failure of any kind ends the whole job
                    return True
        return False

    def done(self) -> bool:
        return self._outcome is not None or self._job.done() or self._one_failed()

    def result(self, timeout: float | None = None) -> Any:
        if self._outcome is None:
            try:
                self._outcome = (self._job.result(timeout=timeout), None)
            except TimeoutError:
                raise
            except BaseException as e:  # noqa: BLE001 - kept, so a second call raises the same
                self._outcome = (None, e)
        value, error = self._outcome
        if error is not None:
            raise error
        return value

    def cancel(self, grace_s: float | None = None) -> None:
        self._job.cancel(grace_s)

    def logs(self) -> str:
        return "".join(self._job.logs())


def _run_then_leave_jax(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """One process's call, then its leave of the JAX job it joined (``jax.distributed.shutdown``).

    fray's processes end with ``os._exit``, which skips JAX's own atexit shutdown. Process 0 hosts
    the coordination service: ended without the shutdown barrier, it takes the service with it
    while the others may still be finishing their call, and each of them then aborts
    (``F... client.h:80] Terminating process because the JAX distributed service detected fatal
    errors``, SIGABRT). The barrier holds process 0 until every process has left. Only after a
    call that returned: a failed process would wait there for the others, stuck in a collective
    it never joined, until the shutdown timeout, instead of failing the job now.
    """
    value = fn(*args, **kwargs)
    jax = sys.modules.get("jax")  # a call that never imported JAX joined no job
    if jax is not None and jax.distributed.is_initialized():
        jax.distributed.shutdown()
    return value


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def launch_local(
    client: DistributedClient,
    fn: Callable[..., Any],
    *args: Any,
    num_processes: int,
    name: str = "multihost",
    env: Mapping[str, str] | None = None,
    resources: Any = None,
    host: str = "127.0.0.1",
    **kwargs: Any,
) -> MultihostJob:
    """Start ``num_processes`` calls of ``fn`` through ``client`` on this machine, as one JAX job."""
    coordinator = f"{host}:{_free_port(host)}"
    handles = []
    for i in range(num_processes):
        spec = MultihostEnv(coordinator, num_processes, i)
        handles.append(client.submit(_run_then_leave_jax, fn, *args, name=f"{name}-{i}",
                                     env={**(env or {}), **spec.to_env()}, resources=resources, **kwargs))
    return MultihostJob(name, handles)


def _node_ip_and_port() -> tuple[str, int]:
    import ray

    # The address the node registered with (``--node-ip-address``), which other nodes can reach.
    node_id = ray.get_runtime_context().get_node_id()
    ip = next(n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == node_id)
    return ip, _free_port(ip)


def launch_ray(
    client: RayClient,
    fn: Callable[..., Any],
    *args: Any,
    resources: ResourceConfig,
    name: str = "multihost",
    env: Mapping[str, str] | None = None,
    strategy: PlacementStrategy = PlacementStrategy.STRICT_SPREAD,
    ready_timeout_s: float = 600.0,
    **kwargs: Any,
) -> MultihostJob:
    """Reserve one bundle per host in a Ray placement group, then run one process of ``fn`` in each.

    Process 0's bundle (on a TPU slice: the host with the slice's head resource) also hosts the
    coordinator: a probe task there picks its address before the processes start.

    Raises:
        TimeoutError: the cluster could not provide the hosts within ``ready_timeout_s``.
    """
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    bundles = resources.ray_bundles()
    group = placement_group(bundles, strategy=strategy.value, name=name)
    ready, _ = ray.wait([group.ready()], timeout=ready_timeout_s)
    if not ready:
        remove_placement_group(group)
        raise TimeoutError(
            f"{name}: Ray could not reserve {len(bundles)} x {bundles[0]} ({strategy.value}) "
            f"within {ready_timeout_s}s; is the cluster big enough?"
        )
    try:
        probe = ray.remote(_node_ip_and_port).options(
            num_cpus=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=0),
        )
        ip, port = ray.get(probe.remote(), timeout=ready_timeout_s)
        coordinator = f"{ip}:{port}"
        handles = []
        for i in range(len(bundles)):
            options = {
                **{k: v for k, v in resources.to_ray_options().items() if k != "accelerator_type"},
                # The bundle already holds the host's resources; the head resource is not asked twice.
                "resources": {k: v for k, v in bundles[i].items() if k not in ("CPU", "GPU", "memory")},
                "scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i),
                # A lost host breaks the whole JAX job: the runner retries the job as a whole.
                "max_retries": 0,
            }
            spec = MultihostEnv(coordinator, len(bundles), i)
            handles.append(client.submit(_run_then_leave_jax, fn, *args, name=f"{name}-{i}",
                                         env={**(env or {}), **spec.to_env()}, resources=options, **kwargs))
    except BaseException:
        remove_placement_group(group)
        raise
    return MultihostJob(name, handles, on_finish=lambda: remove_placement_group(group))


def launch(
    client: DistributedClient,
    fn: Callable[..., Any],
    *args: Any,
    resources: ResourceConfig,
    name: str = "multihost",
    env: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> MultihostJob:
    """Run ``fn`` once per host of ``resources``: a placement group on Ray, local processes otherwise."""
    match client:
        case RayClient():
            return launch_ray(client, fn, *args, resources=resources, name=name, env=env, **kwargs)
        case LocalClient():
            return launch_local(client, fn, *args, num_processes=resources.num_hosts, name=name, env=env,
                                resources=None, **kwargs)
    raise TypeError(f"no multi-host launcher for {type(client).__name__}")
