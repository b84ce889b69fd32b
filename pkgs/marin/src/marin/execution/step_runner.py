"""The Make-style runner: build what is missing, reuse what is built, each distinct hash once."""

from __future__ import annotations

import enum
import logging
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from marin.execution.hashing import (
    UnserializableConfig,
    config_to_json,
    flatten_config,
    fn_identity,
    workspace_root,
)
from marin.execution.lazy import Lazy
from marin.execution.plan import Action, Plan, PlannedStep, Reason, ReasonKind, make_plan
from marin.execution.step import OutputPath, Step
from marin.execution.store import (
    StepRecord,
    StepStore,
    clear_output,
    compute_manifest,
    remove_orphan_temporaries,
)
from marin.execution.worker import FnRef, StepPayload, run_step
from rigging import filesystem as fs
from rigging.lease import Lease, LeaseLost, clear_leases, default_holder, process_alive

__all__ = ["NotCached", "Outcome", "Reporter", "RunResult", "StepOutcome", "StepRunner"]

logger = logging.getLogger(__name__)


class NotCached(RuntimeError):
    """``require_cached`` was set and some steps would have to be built; ``steps`` names them."""

    def __init__(self, steps: list[str]):
        shown = ", ".join(steps[:10]) + (f" and {len(steps) - 10} more" if len(steps) > 10 else "")
        super().__init__(f"{len(steps)} step(s) would have to be built: {shown}")
        self.steps = steps


class Outcome(enum.Enum):
    CACHED = "cached"
    RAN = "ran"
    FAILED = "failed"
    UPSTREAM_FAILED = "not run: upstream failed"
    WOULD_RUN = "would run"
    UNNEEDED = "unneeded"
    INTERRUPTED = "interrupted"


@dataclass
class StepOutcome:
    """What happened to one step in a run."""

    name: str
    hash: str
    output_path: str
    outcome: Outcome
    reasons: list[str] = field(default_factory=list)
    error: str | None = None
    traceback: str | None = None
    log_path: str | None = None
    duration: float | None = None
    note: str | None = None


@dataclass
class RunResult:
    """Every step of the run with its outcome, dependencies first."""

    steps: list[StepOutcome]
    prefix: str
    plan: Plan | None = None

    @property
    def ok(self) -> bool:
        return not any(s.outcome in (Outcome.FAILED, Outcome.UPSTREAM_FAILED, Outcome.INTERRUPTED) for s in self.steps)

    @property
    def failed(self) -> list[StepOutcome]:
        return [s for s in self.steps if s.outcome is Outcome.FAILED]

    def by_name(self, name: str) -> StepOutcome:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)

    def count(self, outcome: Outcome) -> int:
        return sum(1 for s in self.steps if s.outcome is outcome)


class Reporter(Protocol):
    """Receives the runner's progress; the CLI draws it."""

    def planned(self, plan: Plan) -> None: ...
    def started(self, planned: PlannedStep) -> None: ...
    def waiting(self, planned: PlannedStep, holder: str) -> None: ...
    def finished(self, outcome: StepOutcome) -> None: ...
    def tick(self, running: Sequence[PlannedStep]) -> None: ...


class _QuietReporter:
    def planned(self, plan: Plan) -> None:
        pass

    def started(self, planned: PlannedStep) -> None:
        logger.info("running %s", planned.output_name)

    def waiting(self, planned: PlannedStep, holder: str) -> None:
        logger.info("waiting for %s (held by %s)", planned.output_name, holder)

    def finished(self, outcome: StepOutcome) -> None:
        logger.info("%s %s", outcome.outcome.value, outcome.name)

    def tick(self, running: Sequence[PlannedStep]) -> None:
        pass


def _fn_ref(fn: Any) -> FnRef:
    module, qualname = fn_identity(fn).split(":", 1)
    source = sys.modules.get(fn.__module__)
    file = getattr(source, "__file__", None)
    return FnRef(module=module, qualname=qualname, file=os.path.abspath(file) if file else None)


def _resolve(value: Any, paths: dict[int, str]) -> Any:
    """The config with every placeholder replaced by its real path (dataclasses rebuilt)."""
    import dataclasses

    if isinstance(value, OutputPath):
        step = value.step.lower() if isinstance(value.step, Lazy) else value.step
        base = paths[id(step)]
        return fs.join(base, value.sub_path) if value.sub_path else base
    if isinstance(value, Lazy):
        return paths[id(value.lower())]
    if isinstance(value, Step):
        return paths[id(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            old = getattr(value, f.name)
            new = _resolve(old, paths)
            if new is not old:
                changes[f.name] = new
        if not changes:
            return value
        init_changes = {k: v for k, v in changes.items() if next(f for f in dataclasses.fields(value) if f.name == k).init}
        out = dataclasses.replace(value, **init_changes)
        for k, v in changes.items():
            if k not in init_changes:
                object.__setattr__(out, k, v)
        return out
    if isinstance(value, dict):
        new = {k: _resolve(v, paths) for k, v in value.items()}
        return value if all(new[k] is value[k] for k in value) else new
    if isinstance(value, list | tuple):
        items = [_resolve(v, paths) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(items) if isinstance(value, list) else tuple(items)
    return value


def _resources_of(step: Step) -> Any:
    """The step's iris ``ResourceConfig``; a step that says nothing asks for one CPU."""
    from iris.cluster import ResourceConfig

    resources = step.resources if step.resources is not None else ResourceConfig()
    if not isinstance(resources, ResourceConfig):
        raise TypeError(f"step {step.name}: resources must be an iris ResourceConfig or None, "
                        f"got {type(resources).__name__}")
    return resources


def _is_lost_process(error: BaseException) -> bool:
    """True when a step did not raise but its process died or its worker or host was lost."""
    from fray.cluster import JobFailed

    return isinstance(error, JobFailed) and error.process_died


class _MultihostHandle:
    """The processes of a multi-host step as one job: done when all are, or as soon as one failed."""

    def __init__(self, job: Any):
        self._job = job
        self.handles = job.handles
        self.name = job.name
        self._outcome: tuple[bool, Any] | None = None

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
                self._outcome = (True, self._job.result(timeout=timeout))
            except TimeoutError:
                raise
            except BaseException as e:  # noqa: BLE001 - kept, so a second call raises the same
                self._outcome = (False, e)
        ok, value = self._outcome
        if not ok:
            raise value
        return value

    def cancel(self) -> None:
        self._job.cancel()

    def logs(self) -> str:
        return "".join(self._job.logs())


@dataclass
class _Running:
    planned: PlannedStep
    lease: Lease
    handle: Any
    started: float
    attempt: int
    local_log: str
    remote_log: str | None
    admission: Any = None  # iris Admission held while the step runs on this machine
    resubmit: Any = None  # starts the step again (a retry after its process died); returns a handle
    retries_left: int = 0
    retries: int = 0  # retries so far in this run
    stream_logs: bool = False  # the worker cannot write the log file: copy the handle's logs() into it
    log_offsets: dict[int, int] = field(default_factory=dict)
    logs_polled: float = 0.0


class StepRunner:
    """Evaluates a graph of steps Make-style.

    Each step runs where its ``resources`` (an iris ``ResourceConfig``; None means one CPU) say:
    on the local backend, once this machine has room for it next to the steps already running
    (a step that could never fit is refused when planning); on Ray, as a task asking for those
    resources. A step spanning several hosts runs one process per host (``iris.multihost``) and
    counts as one step. A step whose process died or whose worker or host was lost (as opposed
    to ``fn`` raising; levanter's ``TrainingPreempted`` counts as lost: exit code 75) is run
    again, keeping its output folder so a resumable step continues from what it committed, up
    to ``resources.max_retries`` times (0 unless the step asks; TPU resources default to 3).
    Attempts are counted in the step's status and provenance.

    Args:
        prefix: where outputs live; default from the configuration (``rigging``).
        max_parallel: how many steps may run at once; default from the configuration, else one
            per CPU.
        force: glob patterns of step names to rebuild even when cached.
        dry_run: plan only; run nothing.
        only: glob patterns: build only matching steps and their dependencies.
        lease_ttl: seconds a lease lives without a heartbeat before another runner may take over.
        strict_env: make the environment fingerprint part of every hash.
        reporter: receives progress (the CLI's display); default: log lines.
        client: the ``fray`` client that runs each step in its own process; default: made from
            ``backend``.
        backend: where steps run: ``Backend.LOCAL`` (processes on this machine, admitted so that
            running steps never ask for more CPUs or memory together than it has) or
            ``Backend.RAY`` (tasks on the Ray cluster at ``ray_address``); default from the
            configuration.
        ray_address: the Ray cluster (``host:port`` or ``auto``); None starts a private local one.
        capacity: what this machine offers to local steps (an iris ``MachineCapacity``); default:
            detected.
        poll_interval: seconds between checks of running and awaited steps.
        caches: read-only caches (other prefixes) to fetch finished steps from before building;
            default from the configuration.
        require_cached: refuse to build anything (raise :class:`NotCached` naming the steps).
    """

    def __init__(
        self,
        prefix: str | None = None,
        max_parallel: int | None = None,
        force: Sequence[str] = (),
        dry_run: bool = False,
        *,
        only: Sequence[str] = (),
        lease_ttl: float = 60.0,
        strict_env: bool | None = None,
        reporter: Reporter | None = None,
        client: Any = None,
        poll_interval: float = 0.1,
        config: Any = None,
        caches: Sequence[str] | None = None,
        require_cached: bool = False,
        backend: Any = None,
        ray_address: str | None = None,
        capacity: Any = None,
    ):
        if config is None and (prefix is None or max_parallel is None or strict_env is None):
            from rigging.config.discovery import discover_config

            config = discover_config()
        self.prefix = prefix or config.resolved_prefix()
        self.max_parallel = max_parallel or (config.max_parallel if config else None) or (os.cpu_count() or 1)
        if self.max_parallel < 1:
            raise ValueError(f"max_parallel must be >= 1, got {self.max_parallel}")
        self.force = tuple(force)
        self.only = tuple(only)
        self.dry_run = dry_run
        self.lease_ttl = lease_ttl
        self.strict_env = bool(config.strict_env if strict_env is None and config else strict_env)
        self.reporter: Reporter = reporter or _QuietReporter()
        self._client = client
        self.poll_interval = poll_interval
        self.store = StepStore(self.prefix)
        self.holder = default_holder()
        self.caches = tuple(caches if caches is not None else (config.caches if config else ()))
        self.require_cached = require_cached
        self._config = config
        self._backend_arg = backend
        self.ray_address = ray_address if ray_address is not None else (config.ray_address if config else None)
        self._capacity = capacity
        self._admission: Any = None
        self._owns_client = False

    # -- planning ---------------------------------------------------------------------------
    def _env(self) -> tuple[dict[str, Any], str]:
        from marin.execution.environment import environment_fingerprint, fingerprint_digest

        fingerprint = environment_fingerprint(workspace_root())
        return fingerprint, fingerprint_digest(fingerprint)

    def plan(self, steps: Iterable[Step | Lazy], *, explain: bool = True, note_env: bool = False) -> Plan:
        """The plan for ``steps``: cached, or the reason each would run.

        Args:
            explain: give the reasons of the steps that would run.
            note_env: also say which cached steps were built in another environment (reads every
                cached step's provenance: for ``marin plan``, not for the no-op path of a run).
        """
        salt = env_digest = None
        if self.strict_env:
            _, salt = self._env()
            env_digest = salt
        elif note_env:
            _, env_digest = self._env()
        return make_plan(steps, self.store, force=self.force, only=self.only, salt=salt,
                         explain=explain, env_digest=env_digest if note_env else None, caches=self.caches)

    # -- running ----------------------------------------------------------------------------
    def run(self, steps: Iterable[Step | Lazy]) -> RunResult:
        """Build every step of the graph that is not already built; see :class:`RunResult`."""
        steps = list(steps)
        plan = self.plan(steps, explain=True)
        if self.require_cached and plan.to_run():
            raise NotCached([p.output_name for p in plan.to_run()])
        if plan.to_run():
            self.check_resources(plan)
        self.reporter.planned(plan)
        outcomes: dict[int, StepOutcome] = {}
        for pos, p in enumerate(plan.steps):
            if p.action is Action.CACHED:
                outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.CACHED, note=p.env_note)
            elif p.action is Action.UNNEEDED:
                outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.UNNEEDED)
            elif self.dry_run and p.action is Action.FETCH:
                outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.WOULD_RUN,
                                            reasons=[str(r) for r in p.reasons], note="would fetch from cache")
            elif self.dry_run:
                outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.WOULD_RUN,
                                            reasons=[str(r) for r in p.reasons])
        if not self.dry_run and plan.to_do():
            self._execute(plan, outcomes)
        result = RunResult([outcomes[i] for i in range(len(plan.steps))], self.store.prefix, plan)
        return result

    @property
    def backend(self) -> Any:
        """Where steps run (a ``rigging.config.discovery.Backend``), from the argument or the config."""
        from rigging.config.discovery import Backend, discover_config

        if self._backend_arg is None:
            if self._config is None:
                self._config = discover_config()
            self._backend_arg = self._config.backend
            if self.ray_address is None:
                self.ray_address = self._config.ray_address
        return self._backend_arg if isinstance(self._backend_arg, Backend) else Backend(str(self._backend_arg).lower())

    def _runs_on_this_machine(self) -> bool:
        """True when steps run as processes here (admitted against this machine's capacity)."""
        from fray.cluster import LocalClient

        if self._client is not None:
            return isinstance(self._client, LocalClient | _InProcessClient)
        from rigging.config.discovery import Backend

        return self.backend is Backend.LOCAL or fs.protocol_of(self.prefix) == "memory"

    def _admission_controller(self) -> Any:
        if self._admission is None:
            from iris.admission import AdmissionController

            self._admission = AdmissionController(self._capacity)
        return self._admission

    def check_resources(self, plan: Plan) -> None:
        """Refuse, before anything runs, a step that needs more than this machine has at all.

        Only for steps that run here (the local backend); on Ray the cluster's scheduler decides.

        Raises:
            iris.admission.ResourcesTooLarge: naming the step and the resource it lacks.
        """
        if not self._runs_on_this_machine():
            return
        from iris.admission import ResourcesTooLarge

        controller = self._admission_controller()
        for p in plan.to_run():
            try:
                controller.check_fits(_resources_of(p.step))
            except ResourcesTooLarge as e:
                raise ResourcesTooLarge(f"step {p.name}: {e}") from None

    def close(self) -> None:
        """Shut down the client this runner made (a Ray connection, local log folders)."""
        if self._client is not None and self._owns_client:
            self._client.shutdown()
            self._client = None
            self._owns_client = False

    def _client_or_default(self) -> Any:
        if self._client is None:
            from rigging.config.discovery import Backend

            if fs.protocol_of(self.prefix) != "memory" and self.backend is Backend.RAY:
                from fray.cluster import RayClient

                self._client = RayClient(address=self.ray_address)
                self._owns_client = True
                return self._client
            if fs.protocol_of(self.prefix) == "memory":
                # memory:// exists only inside this process: a step run in a process of its own
                # would write into a store nobody else sees, and its empty output would be
                # published as done. So memory:// steps run here.
                self._client = _InProcessClient()
            else:
                from fray.cluster import LocalClient

                self._client = LocalClient()
                self._owns_client = True
        return self._client

    def _execute(self, plan: Plan, outcomes: dict[int, StepOutcome]) -> None:
        pending = [pos for pos, p in enumerate(plan.steps) if p.action in (Action.RUN, Action.FETCH)]
        running: dict[int, _Running] = {}
        waiting_on: dict[int, str] = {}
        paths = plan.paths()
        try:
            while pending or running:
                progressed = False
                for pos in list(pending):
                    p = plan.steps[pos]
                    dep_outcomes = [outcomes.get(d) for d in p.deps]
                    if any(o is not None and o.outcome in (Outcome.FAILED, Outcome.UPSTREAM_FAILED) for o in dep_outcomes):
                        failed = [plan.steps[d].name for d, o in zip(p.deps, dep_outcomes, strict=True)
                                  if o is not None and o.outcome in (Outcome.FAILED, Outcome.UPSTREAM_FAILED)]
                        outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.UPSTREAM_FAILED,
                                                    reasons=[str(r) for r in p.reasons],
                                                    error=f"upstream failed: {', '.join(failed)}")
                        self.reporter.finished(outcomes[pos])
                        pending.remove(pos)
                        progressed = True
                        continue
                    # A fetch copies a finished output whole: it waits for no inputs.
                    if p.action is not Action.FETCH and not all(
                        o is not None and o.outcome in (Outcome.CACHED, Outcome.RAN) for o in dep_outcomes
                    ):
                        continue
                    if len(running) >= self.max_parallel:
                        break
                    admission = self._try_admit(p, outcomes, pos)
                    if admission is None:
                        if pos in outcomes:
                            pending.remove(pos)
                            progressed = True
                        continue  # no room now: a smaller step may still fit
                    before = len(pending)
                    started = self._try_start(plan, pos, paths, outcomes, waiting_on, pending)
                    if len(pending) != before:
                        progressed = True  # a refused cache entry brought its inputs into the run
                    if started is not None:
                        started.admission = admission
                        running[pos] = started
                        pending.remove(pos)
                        progressed = True
                    else:
                        admission.release()
                        if pos in outcomes:
                            pending.remove(pos)
                            progressed = True
                for pos in list(running):
                    r = running[pos]
                    if r.stream_logs:
                        self._pull_logs(r)
                    if r.handle.done() and not r.lease.lost and self._retry(r):
                        progressed = True
                        continue
                    if r.handle.done() or r.lease.lost:
                        try:
                            outcome = self._finish(plan, pos, r)
                        finally:
                            if r.admission is not None:
                                r.admission.release()
                        del running[pos]
                        progressed = True
                        if outcome is None:
                            pending.append(pos)  # lost the lease: wait for whoever holds it now
                        else:
                            outcomes[pos] = outcome
                            self.reporter.finished(outcome)
                if not progressed and not running and not waiting_on and pending:
                    stuck = ", ".join(plan.steps[pos].name for pos in pending[:5])
                    raise RuntimeError(f"scheduler stalled with no step runnable: {stuck}")
                if not progressed:
                    self.reporter.tick([r.planned for r in running.values()])
                    time.sleep(self.poll_interval)
        except BaseException:
            for pos, r in running.items():
                r.handle.cancel()
                if r.admission is not None:
                    r.admission.release()
                self._record_status(r.planned, "interrupted", r.attempt, error="interrupted by the runner")
                r.lease.release()
                outcomes[pos] = StepOutcome(r.planned.name, r.planned.hash, r.planned.output_path,
                                            Outcome.INTERRUPTED, error="interrupted")
            for pos in pending:
                p = plan.steps[pos]
                outcomes.setdefault(pos, StepOutcome(p.name, p.hash, p.output_path, Outcome.INTERRUPTED))
            raise

    def _try_start(self, plan: Plan, pos: int, paths: dict[int, str], outcomes: dict[int, StepOutcome],
                   waiting_on: dict[int, str], pending: list[int]) -> _Running | None:
        p = plan.steps[pos]
        record = StepRecord(p.output_path)
        forced = any(r.kind.name == "FORCED" for r in p.reasons)
        if not forced and record.is_done():
            outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.CACHED,
                                        note="built by another runner" if pos in waiting_on else None)
            self.reporter.finished(outcomes[pos])
            return None
        lease = Lease.acquire(record.meta, ttl=self.lease_ttl, holder=self.holder)
        if lease is None:
            from rigging.lease import current_lease

            info = current_lease(record.meta)
            holder = info.holder if info else "?"
            if waiting_on.get(pos) != holder:
                waiting_on[pos] = holder
                self.reporter.waiting(p, holder)
            return None
        # Somebody may have published between our check and our lease.
        if not forced and record.is_done():
            lease.release()
            clear_leases(record.meta)
            outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.CACHED, note="built by another runner")
            self.reporter.finished(outcomes[pos])
            return None
        if p.action is Action.FETCH:
            if self._fetch(p, lease):
                outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.CACHED,
                                            note=f"fetched from {p.cache_hit.cache}")
                self.reporter.finished(outcomes[pos])
                return None
            # The cache entry was refused: build it here, its inputs first.
            p.action = Action.RUN
            p.reasons = [Reason(ReasonKind.NEW, "cache entry refused; rebuilding")]
            if self._activate_inputs(plan, pos, outcomes, pending):
                lease.release()
                return None
        lease.start_heartbeat()
        try:
            if forced and pos not in waiting_on:
                clear_output(p.output_path)
            status = record.read_json(record.status) or {}
            _end_orphaned_worker(status)
            # A killed attempt may have left a half-written temporary; the new one starts clean.
            remove_orphan_temporaries(p.output_path)
            attempt = int(status.get("attempt", 0)) + 1
            self._record_status(p, "running", attempt)
            config = _resolve(p.step.config, paths)
            try:
                config_bytes = pickle.dumps(config)
            except Exception as e:  # noqa: BLE001 - reported as the step's failure
                raise UnserializableConfig(f"{p.name}: config cannot be sent to a worker: {e}") from e
            local_log, remote_log = self._log_paths(p)
            root = workspace_root()
            client = self._client_or_default()
            # A worker elsewhere (Ray) cannot write the runner's log file: its output is copied
            # from the handle instead.
            stream_logs = not self._runs_on_this_machine()
            payload = StepPayload(
                step_name=p.name,
                fn=_fn_ref(p.step.fn),
                config_pickle=config_bytes,
                output_path=p.output_path,
                log_path=None if stream_logs else local_log,
                sys_path=tuple(x for x in (root, *sys.path[:1]) if x),
                exit_on_preemption=not isinstance(client, _InProcessClient),
            )
            if fs.is_local(p.output_path):
                os.makedirs(fs.strip_protocol(p.output_path), exist_ok=True)
            resources = _resources_of(p.step)
            submit = self._submitter(client, payload, p, resources, on_this_machine=not stream_logs)
            handle = submit()
            worker_pid = getattr(handle, "pid", None)
            if isinstance(worker_pid, int) and not stream_logs:
                self._record_status(p, "running", attempt, worker_pid=worker_pid)
        except Exception as e:  # noqa: BLE001 - a step that cannot start is that step's failure
            self._record_status(p, "failed", 0, error=f"{type(e).__name__}: {e}", tb=traceback.format_exc())
            lease.release()
            outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.FAILED,
                                        reasons=[str(r) for r in p.reasons], error=f"{type(e).__name__}: {e}",
                                        traceback=traceback.format_exc())
            self.reporter.finished(outcomes[pos])
            return None
        self.reporter.started(p)
        return _Running(p, lease, handle, time.time(), attempt, local_log, remote_log, resubmit=submit,
                        retries_left=resources.max_retries, stream_logs=stream_logs)

    def _submitter(self, client: Any, payload: StepPayload, p: PlannedStep, resources: Any, *,
                   on_this_machine: bool) -> Any:
        """A function that starts the step (again, for a retry) and returns its handle."""
        env = {"MARIN_LOG_LEVEL": logging.getLevelName(logging.getLogger().level)}
        if resources.num_hosts > 1:
            from iris.multihost import launch

            def start_multihost() -> Any:
                job = launch(client, run_step, payload, resources=resources, name=p.output_name, env=env)
                return _MultihostHandle(job)

            return start_multihost
        # Ray never retries on its own: the runner does, so that it counts and records attempts.
        extra = {} if on_this_machine else {"resources": {**resources.to_ray_options(), "max_retries": 0}}

        def start() -> Any:
            return client.submit(run_step, payload, name=p.output_name, env=env, **extra)

        return start

    def _try_admit(self, p: PlannedStep, outcomes: dict[int, StepOutcome], pos: int) -> Any:
        """Room on this machine for ``p`` (an iris ``Admission`` to release when it ends), or None.

        A step that needs nothing admitted here (a fetch, or any step on Ray) gets a no-op token.
        A step that can never fit fails (it was checked at plan time unless a refused cache entry
        brought it into the run later).
        """
        if p.action is not Action.RUN or not self._runs_on_this_machine():
            return _NoAdmission()
        from iris.admission import ResourcesTooLarge

        try:
            return self._admission_controller().try_admit(_resources_of(p.step))
        except (ResourcesTooLarge, TypeError) as e:
            outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.FAILED,
                                        reasons=[str(r) for r in p.reasons],
                                        error=f"step {p.name}: {e}" if isinstance(e, ResourcesTooLarge) else str(e))
            self.reporter.finished(outcomes[pos])
            return None

    def _retry(self, r: _Running) -> bool:
        """Start ``r`` again if its process died (rather than raising) and it has retries left."""
        if r.resubmit is None or r.retries_left <= 0:
            return False
        try:
            r.handle.result(timeout=0)
            return False
        except BaseException as e:  # noqa: BLE001 - only inspected here; _finish reports it
            if not _is_lost_process(e):
                return False
            error = str(e)
        if r.stream_logs:
            self._pull_logs(r, final=True)
        p = r.planned
        r.retries_left -= 1
        r.retries += 1
        r.attempt += 1
        logger.warning("%s: %s; retrying (attempt %d)", p.output_name, error, r.attempt)
        self._append_log(r, f"\n[marin] attempt {r.attempt - 1} of {p.name} lost its process ({error}); "
                            f"starting attempt {r.attempt}\n")
        self._record_status(p, "running", r.attempt, error=f"attempt {r.attempt - 1}: {error}")
        r.log_offsets = {}
        try:
            r.handle = r.resubmit()
        except Exception as e:  # noqa: BLE001 - a step that cannot restart fails like any other
            e.remote_traceback = traceback.format_exc()  # type: ignore[attr-defined]
            r.handle = _DoneJob(error=e)
        return True

    def _append_log(self, r: _Running, text: str) -> None:
        os.makedirs(os.path.dirname(r.local_log), exist_ok=True)
        with open(r.local_log, "a", encoding="utf-8") as f:
            f.write(text)

    def _pull_logs(self, r: _Running, *, final: bool = False) -> None:
        """Append what the step printed since the last pull to its log file (workers elsewhere)."""
        now = time.monotonic()
        if not final and now - r.logs_polled < _LOG_PULL_INTERVAL_S:
            return
        r.logs_polled = now
        chunks = []
        for i, h in enumerate(getattr(r.handle, "handles", None) or [r.handle]):
            text = h.logs()
            sent = r.log_offsets.get(i, 0)
            if len(text) > sent:
                chunks.append(text[sent:])
                r.log_offsets[i] = len(text)
        if chunks:
            self._append_log(r, "".join(chunks))

    def _fetch(self, p: PlannedStep, lease: Lease) -> bool:
        """Copy ``p`` from its cache and publish it; False (with a warning) if the entry is bad."""
        from marin.execution.cache import CacheMiss, substitute

        record = StepRecord(p.output_path)
        try:
            substitute(p.cache_hit, p.output_path)
            lease.check()
            manifest = record.read_json(record.manifest) or compute_manifest(p.output_path)
            fs.create_if_absent(record.success, _success_body(p, manifest))
        except CacheMiss as e:
            logger.warning("%s; rebuilding %s", e, p.output_name)
            return False
        except LeaseLost as e:
            logger.warning("%s: %s", p.output_name, e)
            return False
        lease.release()
        clear_leases(record.meta)
        return True

    def _activate_inputs(self, plan: Plan, pos: int, outcomes: dict[int, StepOutcome], pending: list[int]) -> bool:
        """Bring the inputs of a step that must now be built into the run; True if any were added."""
        added = False
        stack = [d for d in plan.steps[pos].deps]
        while stack:
            d = stack.pop()
            o = outcomes.get(d)
            if o is None or o.outcome is not Outcome.UNNEEDED:
                continue
            q = plan.steps[d]
            del outcomes[d]
            if StepRecord(q.output_path).is_done():
                outcomes[d] = StepOutcome(q.name, q.hash, q.output_path, Outcome.CACHED)
                continue
            from marin.execution.cache import find_in_caches

            q.cache_hit = find_in_caches(q.output_name, self.caches) if self.caches else None
            q.action = Action.FETCH if q.cache_hit is not None else Action.RUN
            q.reasons = [Reason(ReasonKind.UPSTREAM_CHANGED, f"needed to rebuild {plan.steps[pos].name}")]
            pending.append(d)
            added = True
            if q.action is Action.RUN:
                stack.extend(q.deps)
        return added

    def _log_paths(self, p: PlannedStep) -> tuple[str, str | None]:
        record = StepRecord(p.output_path)
        if fs.is_local(p.output_path):
            return fs.strip_protocol(record.log), None
        folder = tempfile.mkdtemp(prefix="marin-log-")
        return os.path.join(folder, "log.txt"), record.log

    def _record_status(self, p: PlannedStep, state: str, attempt: int, *, error: str | None = None,
                       tb: str | None = None, worker_pid: int | None = None) -> None:
        record = StepRecord(p.output_path)
        data: dict[str, Any] = {"state": state, "attempt": attempt, "holder": self.holder, "time": time.time()}
        if worker_pid is not None:
            # Host, pid and the process's start time: a reused pid is never mistaken for it.
            data["worker"] = f"{socket.gethostname()}:{worker_pid}:{_proc_start(worker_pid)}"
        if error:
            data["error"] = error
        if tb:
            data["traceback"] = tb
        record.write_json(record.status, data)

    def _finish(self, plan: Plan, pos: int, r: _Running) -> StepOutcome | None:
        p = r.planned
        record = StepRecord(p.output_path)
        duration = time.time() - r.started
        reasons = [str(x) for x in p.reasons]
        try:
            timing = r.handle.result(timeout=0) if not r.lease.lost else None
            if r.lease.lost:
                raise LeaseLost(r.lease.lost)
        except LeaseLost as e:
            r.handle.cancel()
            logger.warning("%s: %s; waiting for the new holder", p.output_name, e)
            return None
        except BaseException as e:  # noqa: BLE001 - a step's failure is data, not a crash of the runner
            from fray.cluster import JobFailed

            tb = getattr(e, "remote_traceback", None) or traceback.format_exc()
            message = str(e)
            if isinstance(e, JobFailed) and message.startswith(f"job {p.output_name} failed: "):
                message = message[len(f"job {p.output_name} failed: "):]
            if _is_lost_process(e):
                message += (f" (the step's process was lost on attempt {r.attempt}; "
                            f"{r.retries} retr{'y' if r.retries == 1 else 'ies'} used of resources.max_retries)")
            self._upload_log(r)
            try:
                self._record_status(p, "failed", r.attempt, error=message, tb=tb)
            finally:
                r.lease.release()
            return StepOutcome(p.name, p.hash, p.output_path, Outcome.FAILED, reasons=reasons, error=message,
                               traceback=tb, log_path=r.remote_log or r.local_log, duration=duration)
        try:
            self._upload_log(r)
            r.lease.check()
            manifest = compute_manifest(p.output_path)
            record.write_json(record.manifest, manifest)
            record.write_json(record.provenance, self._provenance(plan, p, r, timing, manifest))
            r.lease.check()  # fencing: a runner that lost its lease never publishes
            fs.create_if_absent(record.success, _success_body(p, manifest))
        except LeaseLost as e:
            logger.warning("%s: %s; not publishing", p.output_name, e)
            r.lease.stop_heartbeat()
            return None
        r.lease.stop_heartbeat()
        clear_leases(record.meta)
        return StepOutcome(p.name, p.hash, p.output_path, Outcome.RAN, reasons=reasons,
                           log_path=r.remote_log or r.local_log, duration=duration)

    def _upload_log(self, r: _Running) -> None:
        if r.stream_logs:
            self._pull_logs(r, final=True)
        if r.remote_log and os.path.exists(r.local_log):
            with open(r.local_log, "rb") as f:
                fs.atomic_write(r.remote_log, f.read())
            shutil.rmtree(os.path.dirname(r.local_log), ignore_errors=True)
            r.local_log = r.remote_log

    def _provenance(self, plan: Plan, p: PlannedStep, r: _Running, timing: Any, manifest: dict) -> dict[str, Any]:
        fingerprint, digest = self._env()
        paths = plan.paths()
        hashes = plan.hashes()
        return {
            "name": p.name,
            "hash": p.hash,
            "version": p.step.version,
            "fn": fn_identity(p.step.fn),
            "config": config_to_json(p.step.config, paths),
            "config_flat": flatten_config(p.step.config, hashes),
            "dependencies": [{"name": plan.steps[d].name, "hash": plan.steps[d].hash,
                              "path": plan.steps[d].output_path} for d in p.deps],
            "environment": fingerprint,
            "env_digest": digest,
            "strict_env": self.strict_env,
            "host": fingerprint.get("host"),
            "runner": self.holder,
            "started_at": r.started,
            "finished_at": time.time(),
            "duration_s": time.time() - r.started,
            "attempts": r.attempt,
            "retries": r.retries,
            "client": type(self._client).__name__,
            "resources": repr(p.step.resources) if p.step.resources is not None else None,
            "reasons": [x.to_json() for x in p.reasons],
            "worker": timing,
            "output_bytes": manifest["total_bytes"],
            "output_files": len(manifest["files"]),
        }


_LOG_PULL_INTERVAL_S = 1.0


class _NoAdmission:
    """The admission of a step that takes nothing from this machine's ledger."""

    def release(self) -> None:
        pass


class _DoneJob:
    """The handle of a call that already ran (see :class:`_InProcessClient`)."""

    def __init__(self, value: Any = None, error: BaseException | None = None):
        self._value = value
        self._error = error

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> Any:
        if self._error is not None:
            raise self._error
        return self._value

    def cancel(self) -> None:
        pass

    def logs(self) -> str:
        return ""


class _InProcessClient:
    """Runs each step at once in the runner's own process (for ``memory://`` prefixes only).

    The step's Python-level output goes to its log; the process's own descriptors are left alone.
    """

    def submit(self, fn: Any, payload: StepPayload, *, name: str | None = None, env: Any = None,
               **kwargs: Any) -> _DoneJob:
        import contextlib
        import dataclasses

        log_path = payload.log_path
        inner = dataclasses.replace(payload, log_path=None)
        try:
            with contextlib.ExitStack() as stack:
                if log_path:
                    os.makedirs(os.path.dirname(log_path), exist_ok=True)
                    log = stack.enter_context(open(log_path, "a", encoding="utf-8"))
                    stack.enter_context(contextlib.redirect_stdout(log))
                    stack.enter_context(contextlib.redirect_stderr(log))
                try:
                    return _DoneJob(fn(inner, **kwargs))
                except Exception as e:  # noqa: BLE001 - the step's failure, reported through its handle
                    traceback.print_exc()
                    e.remote_traceback = traceback.format_exc()  # type: ignore[attr-defined]
                    return _DoneJob(error=e)
        except OSError as e:
            return _DoneJob(error=e)


def _success_body(p: PlannedStep, manifest: dict) -> str:
    import hashlib
    import json

    digest = hashlib.sha256(json.dumps(manifest["files"], sort_keys=True).encode()).hexdigest()
    return json.dumps({"hash": p.hash, "name": p.name, "finished_at": time.time(), "manifest_sha256": digest})


def _end_orphaned_worker(status: dict[str, Any]) -> None:
    """End the step process of an earlier attempt whose runner died, before a new attempt starts.

    Its runner's lease was taken over because the runner is gone, but the step process notices
    that only within its watchdog's interval; two writers must never share an output folder.
    """
    worker = status.get("worker")
    if not isinstance(worker, str) or status.get("state") != "running":
        return
    host, pid_text, started = (worker.split(":") + ["", ""])[:3]
    if host != socket.gethostname() or not pid_text.isdigit() or int(pid_text) == os.getpid():
        return
    pid = int(pid_text)
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        if not process_alive(pid) or _proc_start(pid) != started:
            return
        time.sleep(0.1)
    logger.warning("ending the step process %d left by a dead runner", pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
    while process_alive(pid) and time.monotonic() < deadline + 5.0:
        time.sleep(0.05)


def _proc_start(pid: int) -> str:
    """The start time of process ``pid`` in clock ticks since boot ("" if unknown)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""
