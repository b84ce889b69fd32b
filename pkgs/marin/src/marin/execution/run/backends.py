"""The clients a runner's steps run on: local processes (warm or fresh), in-process, Ray."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from marin.execution.plan.model import Action, PlannedStep
from marin.execution.plan.resources import resources_of
from marin.execution.run.accelerator import AcceleratorGate, host_accelerator
from marin.execution.run.attempt_context import (
    AttemptContext,
    NothingHeld,
    Releasable,
    WorkerKind,
)
from marin.execution.run.warm_accelerator import AcceleratorProcesses, process_line
from rigging import filesystem as fs
from rigging.config.discovery import Backend

if TYPE_CHECKING:
    from fray.types import DistributedClient
    from iris.accelerator import HostAccelerator
    from iris.admission import AdmissionController, MachineCapacity
    from marin.execution.run.settings import RunSettings

__all__ = ["Backends"]


class Backends:
    """The clients a runner's steps run on: made on first use, shut down by :meth:`close`.

    Args:
        settings: the run's settings (prefix, backend, Ray address, warm workers).
        client: a ``fray`` client to use instead of one made from the configuration.
        capacity: what this machine offers to local steps (default: detected, with the host's
            accelerator: :func:`~marin.execution.run.accelerator.host_accelerator`).

    fray's clients and iris's admission are imported when first asked, so a run that builds nothing
    never pays for them.
    """

    def __init__(self, settings: RunSettings, client: DistributedClient | None = None,
                 capacity: MachineCapacity | None = None):
        self.settings = settings
        self._client = client
        self._owns_client = False
        self._capacity = capacity
        self._admission: AdmissionController | None = None
        self._accelerator: tuple[HostAccelerator | None] | None = None
        self.gate: AcceleratorGate | None = None
        """Waits for an accelerator another process holds (made by :meth:`make_gate`)."""
        self.pool: Any = None
        """The warm worker pool (``fray.pool.WorkerPool``), once a step ran in it."""
        self.accelerator_processes = AcceleratorProcesses()
        """The warm processes local accelerator steps run in (``accelerator_process: warm``)."""

    def accelerator(self) -> HostAccelerator | None:
        """The accelerator of the machine steps run on, when it is this one (local and in-process
        steps): the capacity's, else stated or found (:func:`host_accelerator`); None on Ray."""
        if self._accelerator is None:
            if self._capacity is not None:
                found = self._capacity.accelerator
            else:
                found = host_accelerator(self.settings) if self.worker_kind() is not WorkerKind.REMOTE else None
            self._accelerator = (found,)
        return self._accelerator[0]

    def resources_of(self, p: PlannedStep) -> Any:
        """What the step asks for where it runs (an iris ``ResourceConfig``): on this machine, an
        accelerator step that says nothing asks for a slot of the host's accelerator."""
        return resources_of(p.step, self.accelerator())

    def make_gate(self, report: Any) -> None:
        """Check the accelerator's lock file before each accelerator step starts (local steps on a
        host with an accelerator), telling ``report(planned, line)`` of each wait."""
        accelerator = self.accelerator()
        if accelerator is not None and self.worker_kind() is not WorkerKind.REMOTE:
            lock = self.settings.accelerator_lock or accelerator.default_lock
            self.gate = AcceleratorGate(lock, self.settings.accelerator_wait, report)

    def worker_kind(self) -> WorkerKind:
        """Where steps' functions run."""
        if self._client is not None:
            # fray's clients: only for a client given (the runner asks this on every run).
            from fray.cluster import LocalClient
            from fray.inprocess import InProcessClient

            if isinstance(self._client, InProcessClient):
                return WorkerKind.IN_PROCESS
            return WorkerKind.LOCAL_PROCESS if isinstance(self._client, LocalClient) else WorkerKind.REMOTE
        if fs.protocol_of(self.settings.prefix) == "memory":
            return WorkerKind.IN_PROCESS
        return WorkerKind.LOCAL_PROCESS if self.settings.backend is Backend.LOCAL else WorkerKind.REMOTE

    def _steps_client(self) -> DistributedClient:
        """The client steps are submitted to: the one given, else the configuration's, made on first use."""
        if self._client is None:
            if self.worker_kind() is WorkerKind.IN_PROCESS:
                # memory:// exists only inside this process: a step run in a process of its own
                # would write into a store nobody else sees, and its empty output would be
                # published as done. So memory:// steps run here.
                from fray.inprocess import InProcessClient

                self._client = InProcessClient()
            else:
                from fray.cluster import current_client

                self._client = current_client(self.settings)
                self._owns_client = True
        return self._client

    def _warm_pool(self) -> Any:
        if self.pool is None:
            from fray.pool import PoolConfig, WorkerPool

            self.pool = WorkerPool(PoolConfig(max_calls=self.settings.warm_worker_max_steps))
        return self.pool

    def attempt_context(self, holder: str, environment: Callable[[], tuple[dict[str, Any], str]]) -> AttemptContext:
        """What every attempt of a run shares (see :class:`~marin.execution.run.attempt.AttemptContext`)."""
        from fray.cluster import LocalClient

        client = self._steps_client()
        warm = self.settings.warm_workers and isinstance(client, LocalClient)
        warm_accelerator = self.settings.accelerator_process == "warm" and isinstance(client, LocalClient)
        processes = self.accelerator_processes
        return AttemptContext(self.settings, holder, client, self.worker_kind(), environment,
                              pool=self._warm_pool if warm else None, accelerator=self.accelerator(),
                              accelerator_process=processes.for_slots if warm_accelerator else None,
                              on_cpu_process=processes.submit_on_cpu if warm and warm_accelerator else None)

    def _admission_controller(self) -> AdmissionController:
        if self._admission is None:
            from iris.admission import AdmissionController, MachineCapacity

            capacity = self._capacity or MachineCapacity.detect(self.accelerator())
            self._admission = AdmissionController(capacity)
        return self._admission

    def admit(self, p: PlannedStep) -> Releasable | str | None:
        """Room on this machine for ``p``: an iris ``Admission`` to release when it ends, None when
        there is no room now (or the accelerator it was admitted to is held by another process:
        :class:`~marin.execution.run.accelerator.AcceleratorGate`), or why it can never run here
        (or waited in vain). A step that needs nothing admitted here (a fetch, any step on Ray)
        gets a hold that holds nothing."""
        from iris.admission import ResourcesTooLarge

        if p.action is not Action.RUN or self.worker_kind() is WorkerKind.REMOTE:
            return NothingHeld()
        controller = self._admission_controller()
        # A warm accelerator process of this run holds the accelerator's lock between its steps.
        ours_running = controller.accelerator_in_use or bool(self.accelerator_processes.pids)
        try:
            admission = controller.try_admit(self.resources_of(p))
        except ResourcesTooLarge as e:
            return f"step {p.name}: {e}"
        except (TypeError, ValueError) as e:
            return str(e)
        if admission is None or not admission.slots or self.gate is None:
            return admission
        verdict = self.gate.clear(p, ours_running)
        if verdict is True:
            return admission
        admission.release()
        return verdict or None

    def check_resources(self, steps: Sequence[PlannedStep]) -> None:
        """Refuse a step that could never run: on this machine (local), or on any set of the Ray
        cluster's live nodes (only clients that can list their nodes are checked).

        Raises:
            iris.admission.ResourcesTooLarge: naming the step and the resource it lacks.
        """
        from iris.admission import MachineCapacity, ResourcesTooLarge, check_fits_cluster

        if self.worker_kind() is not WorkerKind.REMOTE:
            controller = self._admission_controller()
            check = controller.check_fits
        else:
            nodes = getattr(self._steps_client(), "nodes", None)
            if nodes is None:
                return
            hosts = [MachineCapacity(cpus=float(n.get("CPU", 0)), memory=int(n.get("memory", 0)),
                                     gpus=int(n.get("GPU", 0)), tpu_chips=int(n.get("TPU", 0)))
                     for n in nodes() if n.get("CPU", 0) > 0]

            def check(resources: Any) -> None:
                check_fits_cluster(resources, hosts, what="the Ray cluster")
        for p in steps:
            try:
                check(self.resources_of(p))
            except ResourcesTooLarge as e:
                raise ResourcesTooLarge(f"step {p.name}: {e}") from None
            except ValueError as e:  # a host's accelerator that names no type a step can ask for
                raise ResourcesTooLarge(str(e)) from None

    def wait(self, busy: bool, seconds: float) -> None:
        """Wait up to ``seconds``: a warm pool with steps running wakes as soon as one ends."""
        if self.pool is not None and busy:
            self.pool.wait_any(seconds)
        else:
            time.sleep(seconds)

    def process_line(self, steps: Sequence[PlannedStep]) -> str | None:
        """How the local accelerator steps among ``steps`` run (the run's header); None: none does."""
        if self.worker_kind() is not WorkerKind.LOCAL_PROCESS or self.accelerator() is None:
            return None
        if not any(self.resources_of(p).accelerator is not None for p in steps):
            return None
        return process_line(self.settings)

    def end_accelerator_processes(self) -> None:
        """The run ended: its warm accelerator processes end, and the accelerator is free."""
        self.accelerator_processes.close()

    def close(self) -> None:
        """Shut down what was made here (a Ray connection, local log folders, warm workers)."""
        self.accelerator_processes.close()
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None
        if self._client is not None and self._owns_client:
            self._client.shutdown()
            self._client = None
            self._owns_client = False
