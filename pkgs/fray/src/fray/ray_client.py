"""Run calls on a Ray cluster. Ray is imported only when a :class:`RayClient` is made."""

from __future__ import annotations

import functools
import importlib.machinery
import itertools
import os
import sys
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

import cloudpickle

from fray.local import LocalClient
from fray.types import (
    ActorHandle,
    DistributedClient,
    Future,
    JobCancelled,
    JobFailed,
    JobHandle,
    ResourcesLike,
    job_name,
    ray_options_of,
)

if TYPE_CHECKING:
    from ray.actor import ActorHandle as RayActorHandle

__all__ = ["RayClient", "RayJobHandle"]

_FORWARD_INTERVAL_S = 0.2


class _LogSink:
    """A Ray actor holding each job's output, so the driver can read it wherever the job ran."""

    def __init__(self) -> None:
        self._chunks: dict[str, list[str]] = {}

    def append(self, job_id: str, chunk: str) -> None:
        self._chunks.setdefault(job_id, []).append(chunk)

    def read(self, job_id: str) -> str:
        return "".join(self._chunks.get(job_id, ()))


def _forward(log_file, sink, job_id: str) -> Any:
    chunk = log_file.read()
    if chunk:
        return sink.append.remote(job_id, chunk)
    return None


def _leave_main_out_of_children() -> None:
    """A Ray worker's ``__main__`` is Ray's own script (``default_worker.py``), which ``spawn`` would
    run again in each job's process (importing all of Ray: about a second) though no job needs it.
    A spec named ``__main__`` is how multiprocessing is told there is no main module to import."""
    main = sys.modules.get("__main__")
    if main is not None and getattr(main, "__spec__", None) is None:
        main.__spec__ = importlib.machinery.ModuleSpec("__main__", None)


def _run_job(payload: bytes, env: dict[str, str], job_id: str, name: str, sink) -> Any:
    """Body of every Ray task: run the call in a child process group on this worker's host.

    The child is what makes cancel end grandchildren too: a force-cancel kills this worker, the
    child's watchdog sees its parent gone and kills its own process group. Its output is tailed
    from a file and forwarded to the driver's log sink as it is written.
    """
    import ray
    from ray.exceptions import RayError

    _leave_main_out_of_children()
    local = LocalClient()
    handle = local.submit_payload(payload, name=name, env=env)
    try:
        with open(handle.log_path, encoding="utf-8", errors="replace") as log_file:
            # Waiting on the job, not sleeping: its end is seen at once, not up to an interval late.
            while not handle.wait(_FORWARD_INTERVAL_S):
                _forward(log_file, sink, job_id)
            last = _forward(log_file, sink, job_id)
            if last is not None:
                try:
                    ray.get(last)
                except RayError:
                    pass  # the sink is gone (its node was lost): the output is, not the job's result
        return handle.result()
    finally:
        local.shutdown()


class _ActorHost:
    """The Ray actor class behind every fray actor: sets the environment, then builds the object."""

    def __init__(self, payload: bytes, env: dict[str, str]):
        os.environ.update(env)
        cls, args, kwargs = cloudpickle.loads(payload)
        self._instance = cls(*args, **kwargs)

    def call(self, method: str, payload: bytes) -> Any:
        args, kwargs = cloudpickle.loads(payload)
        return getattr(self._instance, method)(*args, **kwargs)


def _translate_error(e: BaseException, label: str, cancelled: bool) -> BaseException:
    import ray.exceptions as rex

    if cancelled or isinstance(e, rex.TaskCancelledError):
        return JobCancelled(f"{label} was cancelled")
    if isinstance(e, rex.GetTimeoutError):
        return TimeoutError(str(e))
    if isinstance(e, rex.RayTaskError):
        cause = e.cause
        if isinstance(cause, JobFailed):
            return JobFailed(str(cause), remote_traceback=cause.remote_traceback, exitcode=cause.exitcode,
                             worker_lost=cause.worker_lost)
        return JobFailed(f"{label} failed: {type(cause).__name__}: {cause}", remote_traceback=str(e))
    if isinstance(e, rex.RayError):
        # Not raised by the call: its worker, node or result was lost (killed, crashed, preempted).
        lost = isinstance(e, rex.WorkerCrashedError | rex.NodeDiedError | rex.ObjectLostError
                          | rex.LocalRayletDiedError | rex.OutOfMemoryError)
        return JobFailed(f"{label} failed: {type(e).__name__}: {e}", worker_lost=lost)
    return e


class _RayFuture(Future):
    def __init__(self, ref, label: str):
        self._ref = ref
        self._label = label
        self._cancelled = False

    def done(self) -> bool:
        import ray

        ready, _ = ray.wait([self._ref], timeout=0)
        return bool(ready)

    def result(self, timeout: float | None = None) -> Any:
        import ray
        from ray.exceptions import RayError

        try:
            return ray.get(self._ref, timeout=timeout)
        except (RayError, JobFailed) as e:
            translated = _translate_error(e, self._label, self._cancelled)
            raise translated from None

    def cancel(self) -> None:
        import ray

        if self.done():
            return
        self._cancelled = True
        # Actor calls cannot be force-cancelled: a queued call is dropped, a running one finishes.
        ray.cancel(self._ref, force=False)


class RayJobHandle(_RayFuture, JobHandle):
    """A call running as a Ray task; its output is read from the client's log sink."""

    def __init__(self, ref, name: str, job_id: str, sink):
        super().__init__(ref, f"job {name}")
        self.name = name
        self.job_id = job_id
        self._sink = sink

    def cancel(self, grace_s: float | None = None) -> None:
        """Stop the job and its process tree.

        A plain cancel first: the task is interrupted and its wrapper ends the job's process group.
        Only if it is still running after ``grace_s`` (10 s by default; 0: at once) is the worker
        killed outright (Ray then kills the job's process, but what that started may outlive it).
        """
        import ray

        if self.done():
            return
        self._cancelled = True
        if grace_s != 0:
            ray.cancel(self._ref, force=False)
            ready, _ = ray.wait([self._ref], timeout=10.0 if grace_s is None else grace_s)
            if ready:
                return
        ray.cancel(self._ref, force=True)

    def logs(self) -> str:
        """The job's output so far; empty if the log sink was lost with its node (logs are best effort)."""
        import ray
        from ray.exceptions import RayError

        try:
            return ray.get(self._sink.read.remote(self.job_id))
        except RayError:
            return ""


class _RayActor(ActorHandle):
    def __init__(self, actor, name: str):
        self._actor = actor
        self._name = name

    def call(self, method: str, *args: Any, **kwargs: Any) -> Future:
        ref = self._actor.call.remote(method, cloudpickle.dumps((args, kwargs)))
        return _RayFuture(ref, f"{self._name}.{method}")

    def kill(self) -> None:
        import ray

        ray.kill(self._actor, no_restart=True)


class RayClient(DistributedClient):
    """Runs calls as Ray tasks and actors.

    Args:
        address: a running cluster (``host:port`` or ``auto``); None starts a local one in this
            process (never attaches to some other cluster found on the machine). If Ray is
            already initialized in this process, that connection is used and left open.
        num_cpus: CPUs of a cluster started here (default: all).
        namespace: the Ray namespace to work in.
    """

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None, namespace: str | None = None):
        # Under `uv run`, Ray would start workers through `uv run` again, from their own working
        # folder, re-resolving a different environment (and failing to import ray). Workers must
        # use this interpreter's environment as it is.
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
        import ray

        self._owns_connection = not ray.is_initialized()
        if self._owns_connection:
            ray.init(
                address=address or "local",
                num_cpus=num_cpus if address is None else None,
                namespace=namespace,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
        self._ray = ray
        self._sink: RayActorHandle[_LogSink] | None = None
        self._handles: list[RayJobHandle] = []
        self._actors: list[_RayActor] = []
        self._counter = itertools.count()

    @functools.cached_property
    def _remote_job(self):
        # Made on first use: wrapping a function for Ray needs a connected Ray.
        return self._ray.remote(_run_job)

    @functools.cached_property
    def _remote_host(self):
        return self._ray.remote(_ActorHost)

    def nodes(self) -> list[dict[str, float]]:
        """The total resources of each live node of the cluster (``CPU``, ``memory``, ``GPU``,
        ``TPU`` and custom resources, as Ray counts them)."""
        return [dict(n["Resources"]) for n in self._ray.nodes() if n.get("Alive")]

    def _log_sink(self):
        if self._sink is None:
            # Ray types .remote() as "handle or the class" (for method completion); it is a handle.
            # On the driver's own node (soft: anywhere if that cannot be), so that losing a worker
            # node does not lose the output of every job with it.
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # Ray, on use as above

            here = NodeAffinitySchedulingStrategy(node_id=self._ray.get_runtime_context().get_node_id(), soft=True)
            options: dict[str, Any] = {"num_cpus": 0, "scheduling_strategy": here}  # Ray's stubs lack this strategy
            self._sink = cast("RayActorHandle[_LogSink]", self._ray.remote(**options)(_LogSink).remote())
        return self._sink

    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        resources: ResourcesLike = None,
        **kwargs: Any,
    ) -> RayJobHandle:
        options = {"max_retries": 0, "retry_exceptions": False, **ray_options_of(resources)}
        label = job_name(fn, name)
        job_id = f"{next(self._counter):05d}-{uuid.uuid4().hex[:8]}"
        payload = cloudpickle.dumps((fn, args, kwargs))
        ref = self._remote_job.options(name=label, **options).remote(
            payload, dict(env or {}), job_id, label, self._log_sink()
        )
        handle = RayJobHandle(ref, label, job_id, self._sink)
        self._handles.append(handle)
        return handle

    def create_actor(
        self,
        cls: type,
        *args: Any,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        resources: ResourcesLike = None,
        **kwargs: Any,
    ) -> ActorHandle:
        options = ray_options_of(resources)
        for task_only in ("max_retries", "retry_exceptions"):
            options.pop(task_only, None)
        label = name or cls.__name__
        actor = self._remote_host.options(**options).remote(cloudpickle.dumps((cls, args, kwargs)), dict(env or {}))
        handle = _RayActor(actor, label)
        self._actors.append(handle)
        return handle

    def shutdown(self) -> None:
        # Another user of this process may have shut Ray down already (a test cluster, a library):
        # then its jobs are gone with it and asking about them would start a fresh local Ray.
        if not self._ray.is_initialized():
            self._handles.clear()
            self._actors.clear()
            self._sink = None
            return
        for handle in self._handles:
            if not handle.done():
                handle.cancel()
        for actor in self._actors:
            actor.kill()
        if self._sink is not None:
            self._ray.kill(self._sink)
            self._sink = None
        self._handles.clear()
        self._actors.clear()
        if self._owns_connection:
            self._ray.shutdown()
