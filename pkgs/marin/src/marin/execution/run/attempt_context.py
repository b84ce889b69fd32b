"""What a step runs on: the kinds of worker, the resources a step asks for, the hold it takes
on this machine, and what every attempt of a run shares."""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from marin.execution.core.step import Step
from marin.execution.plan.resources import resources_of
from marin.execution.run.worker import StepPayload, run_step

if TYPE_CHECKING:
    from fray.types import DistributedClient, JobHandle
    from iris.accelerator import HostAccelerator
    from iris.cluster import ResourceConfig
    from marin.execution.run.settings import RunSettings

__all__ = ["AttemptContext", "NothingHeld", "Releasable", "WorkerKind", "is_lost_process", "warm_worker_can_run"]


class WorkerKind(enum.Enum):
    """Where a step's ``fn`` runs, which decides who writes its log and how a preemption ends it."""

    IN_PROCESS = "in-process"  # in the runner's process (memory://): its output comes from the handle
    LOCAL_PROCESS = "local-process"  # a process of its own on this machine: it writes the log itself
    REMOTE = "remote"  # elsewhere (Ray): its output is copied from the handle


class Releasable(Protocol):
    """What an attempt holds while it runs and gives back when it ends (an iris ``Admission``)."""

    slots: tuple[int, ...]
    """The slots of the host's accelerator it holds (none: it runs with the accelerator hidden)."""

    def release(self) -> None: ...


class NothingHeld:
    """The hold of a step that takes nothing from this machine's ledger (a fetch, a step on Ray)."""

    slots: tuple[int, ...] = ()

    def release(self) -> None:
        pass


def warm_worker_can_run(resources: Any) -> bool:
    """A local step runs forked from the warm pool (``fray.pool``) unless it needs devices or hosts
    to itself: an accelerator (GPU or TPU) or more than one host means a fresh interpreter."""
    return resources.accelerator is None and resources.num_hosts == 1


def is_lost_process(error: BaseException) -> bool:
    """True when a step did not raise but its process died or its worker or host was lost."""
    # fray's package imports Ray (~0.8 s): only once a step has ended.
    from fray.cluster import JobFailed

    return isinstance(error, JobFailed) and error.process_died


@dataclass(frozen=True)
class AttemptContext:
    """What every attempt of one run shares with the runner that started it."""

    settings: RunSettings
    """The run's settings: its prefix (where the done index lives,
    :mod:`marin.execution.store.done_index`), places (where other builds of a step may be found: a
    build that differs from another of the same inputs is reported as nondeterministic),
    ``strict_env``."""
    holder: str
    client: DistributedClient
    worker: WorkerKind
    environment: Callable[[], tuple[dict[str, Any], str]]
    """The environment fingerprint and its digest (for provenance)."""
    pool: Callable[[], Any] | None = None
    """The warm worker pool (``fray.pool.WorkerPool``) local steps fork from; None: a fresh
    interpreter each."""
    accelerator: HostAccelerator | None = None
    """This host's accelerator, for steps that run here: only those admitted to it see it."""
    accelerator_process: Callable[[tuple[int, ...], dict[str, str]], Any] | None = None
    """The warm process (``fray.warm_process.WarmProcess``) of the accelerator slots a local step
    holds, given those slots and the variables that grant them
    (:class:`~marin.execution.run.warm_accelerator.AcceleratorProcesses`); None: each accelerator
    step in a fresh interpreter (``accelerator_process: fresh``)."""
    on_cpu_process: Callable[..., Any] | None = None
    """Submits a local step that computes with JAX on a host without an accelerator to a warm
    process (:meth:`~marin.execution.run.warm_accelerator.AcceleratorProcesses.submit_on_cpu`); None:
    such steps fork from the warm pool, or get a fresh interpreter, like any other."""

    def resources_of(self, step: Step) -> ResourceConfig:
        """What ``step`` asks for here (:func:`marin.execution.plan.resources.resources_of`)."""
        return resources_of(step, self.accelerator)

    def accelerator_env(self, resources: ResourceConfig, slots: tuple[int, ...]) -> dict[str, str]:
        """The variables that give a step the accelerator slots it holds, or hide the accelerator
        from it (:mod:`iris.accelerator_env`); for a step elsewhere (Ray) that asks for an
        accelerator, the user's own ``JAX_PLATFORMS``."""
        # Not at import: only a run that starts a step asks (the standard library and fray's request types).
        from iris.accelerator_env import granted_env, hiding_env, users_platforms

        if self.worker is WorkerKind.IN_PROCESS:
            return {}
        if self.worker is WorkerKind.REMOTE:
            return users_platforms(os.environ) if resources.accelerator is not None else {}
        if self.accelerator is None:
            return {}
        if not slots:
            return hiding_env(os.environ, self.accelerator)
        # Not at import either: only a run with a local accelerator step asks.
        from marin.execution.run.warm_accelerator import compilation_cache_env

        return {**granted_env(os.environ, self.accelerator, slots), **compilation_cache_env(self.settings)}

    def submitter(self, payload: StepPayload, resources: ResourceConfig, name: str,
                  slots: tuple[int, ...] = (), computes: bool = False) -> Callable[[], JobHandle]:
        """A function that starts the step ``payload`` describes (again, for a retry) on this run's
        client, as ``resources`` ask, holding ``slots`` of the host's accelerator, and returns its
        job's handle. ``computes``: its function computes on an accelerator (JAX), whichever it is given."""
        client = self.client
        env = {"MARIN_LOG_LEVEL": logging.getLevelName(logging.getLogger().level),
               **self.accelerator_env(resources, slots)}
        if resources.num_hosts > 1:
            # iris's package imports fray's clients and with them Ray (~0.8 s): only for multi-host steps.
            from iris.multihost import MultihostJobHandle, launch

            return lambda: MultihostJobHandle(launch(client, run_step, payload, resources=resources, name=name, env=env))
        if self.worker is WorkerKind.LOCAL_PROCESS and slots and self.accelerator_process is not None:
            warm = self.accelerator_process(slots, env)
            return lambda: warm.submit(run_step, payload, name=name, env=env)
        if (self.worker is WorkerKind.LOCAL_PROCESS and computes and self.accelerator is None
                and self.on_cpu_process is not None and warm_worker_can_run(resources)):
            submit = self.on_cpu_process
            return lambda: submit(run_step, payload, name=name, env=env)
        if self.worker is WorkerKind.LOCAL_PROCESS and self.pool is not None and warm_worker_can_run(resources):
            pool = self.pool()
            return lambda: pool.submit(run_step, payload, name=name, env=env, preload=(payload.fn.module,))
        # Ray never retries on its own: the runner does, so that it counts and records attempts.
        remote = self.worker is WorkerKind.REMOTE
        extra = {} if not remote else {"resources": {**resources.to_ray_options(), "max_retries": 0}}
        return lambda: client.submit(run_step, payload, name=name, env=env, **extra)
