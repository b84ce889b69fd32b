"""The Make-style runner: build what is missing, reuse what is built, each distinct hash once.

This module schedules; one step's attempt (start, poll, retry, publish) is
:class:`marin.execution.attempt.StepAttempt`, what a run reports is in
:mod:`marin.execution.outcome`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from marin.execution import capture
from marin.execution.attempt import (
    AttemptContext,
    NothingHeld,
    Releasable,
    StepAttempt,
    WorkerKind,
    fetch_from_cache,
    publish_copy,
    record_listed,
    resources_of,
)
from marin.execution.lazy import Lazy
from marin.execution.outcome import NotCached, Outcome, QuietReporter, Reporter, RunResult, StepOutcome
from marin.execution.plan import Action, Plan, PlannedStep, Reason, ReasonKind, make_plan
from marin.execution.realise import copy_realisation, realisable, snapshot_build
from marin.execution.step import Step
from marin.execution.store import StepRecord, StepStore
from rigging import filesystem as fs
from rigging.config.discovery import Backend, MarinConfig
from rigging.lease import Lease, current_lease, default_holder

if TYPE_CHECKING:
    from fray.types import DistributedClient
    from iris.admission import AdmissionController, MachineCapacity

__all__ = ["NotCached", "Outcome", "Reporter", "RunResult", "StepOutcome", "StepRunner"]

logger = logging.getLogger(__name__)

_FAILED = (Outcome.FAILED, Outcome.UPSTREAM_FAILED)
_BUILT = (Outcome.CACHED, Outcome.RAN, Outcome.REUSED)


_Settle = Callable[[int, StepOutcome], None]
"""Records the outcome of the step at a position of the plan."""


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
        config: the resolved configuration (``rigging.config.discovery.discover_config``): prefix,
            backend, Ray address, parallelism, caches, strict environment; default: discovered.
            The keyword arguments of the same names override single fields of it.
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
        budget_s: refuse a plan whose estimated wall time exceeds this many seconds
            (``marin.execution.estimate.OverBudget`` naming the steps that dominate).
        budget_accelerator_hours: refuse a plan estimated to use more accelerator-hours (all types).
        early_cutoff: reuse an earlier build of a step whose inputs were rebuilt with identical
            output (``marin.execution.realise``); off, everything downstream of a rebuild runs.
        warm_workers: run local steps in processes forked from a warm worker (``fray.pool``:
            imports paid once, each step still in a process of its own) rather than in a fresh
            interpreter each (False); None: the configuration's ``warm_workers`` (on unless
            set off), with ``warm_worker_max_steps`` steps per warm worker. Steps whose
            resources ask for an accelerator or several hosts always get a fresh process
            (devices to themselves; one JAX job across processes): :func:`marin.execution.attempt.warm_worker_can_run`. JAX on the CPU
            forks safely: the warm worker never starts JAX (an import that starts threads is
            left to each step's own process), so each step initialises it in its own process.
    """

    def __init__(
        self,
        config: MarinConfig | None = None,
        *,
        prefix: str | None = None,
        max_parallel: int | None = None,
        strict_env: bool | None = None,
        caches: Sequence[str] | None = None,
        backend: Backend | str | None = None,
        ray_address: str | None = None,
        force: Sequence[str] = (),
        dry_run: bool = False,
        only: Sequence[str] = (),
        lease_ttl: float = 60.0,
        reporter: Reporter | None = None,
        client: DistributedClient | None = None,
        poll_interval: float = 0.1,
        require_cached: bool = False,
        capacity: MachineCapacity | None = None,
        budget_s: float | None = None,
        budget_accelerator_hours: float | None = None,
        early_cutoff: bool = True,
        warm_workers: bool | None = None,
    ):
        from rigging.config.discovery import discover_config, replace

        if config is not None and not isinstance(config, MarinConfig):
            raise TypeError(f"config must be a rigging MarinConfig, got {type(config).__name__} "
                            "(pass the prefix as prefix=...)")
        if max_parallel is not None and max_parallel < 1:
            raise ValueError(f"max_parallel must be >= 1, got {max_parallel}")
        overrides = {"prefix": prefix, "max_parallel": max_parallel, "strict_env": strict_env,
                     "caches": tuple(caches) if caches is not None else None, "backend": backend,
                     "ray_address": ray_address, "warm_workers": warm_workers}
        overrides = {k: v for k, v in overrides.items() if v is not None}
        if config is None:
            config = discover_config()
        self.config: MarinConfig = replace(config, **overrides) if overrides else config
        self.prefix = self.config.resolved_prefix()
        self.max_parallel = self.config.max_parallel or (os.cpu_count() or 1)
        self.strict_env = self.config.strict_env
        self.caches = self.config.caches
        self.ray_address = self.config.ray_address
        self.force = tuple(force)
        self.only = tuple(only)
        self.dry_run = dry_run
        self.lease_ttl = lease_ttl
        self.reporter: Reporter = reporter or QuietReporter()
        self._client = client
        self.poll_interval = poll_interval
        self.store = StepStore(self.prefix)
        self.holder = default_holder()
        self.require_cached = require_cached
        self._capacity = capacity
        self._admission: AdmissionController | None = None
        self._owns_client = False
        self.budget_s = budget_s
        self.budget_accelerator_hours = budget_accelerator_hours
        self.early_cutoff = early_cutoff
        self.warm_workers = self.config.warm_workers
        self._pool: Any = None

    @property
    def backend(self) -> Backend:
        """Where steps run (a ``rigging.config.discovery.Backend``), from the configuration."""
        return self.config.backend

    # -- planning ---------------------------------------------------------------------------
    def _env(self) -> tuple[dict[str, Any], str]:
        from marin.execution.environment import current_environment

        return current_environment()

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
                         explain=explain, env_digest=env_digest if note_env else None, caches=self.caches,
                         early_cutoff=self.early_cutoff)

    # -- running ----------------------------------------------------------------------------
    def run(self, steps: Iterable[Step | Lazy]) -> RunResult:
        """Build every step of the graph that is not already built; see :class:`RunResult`."""
        steps = list(steps)
        capture.offer(steps)  # `marin run FILE` takes the steps a script's __main__ block runs
        plan = self.plan(steps, explain=True)
        if self.require_cached and plan.to_run():
            raise NotCached([p.output_name for p in plan.to_run()])
        if plan.to_run():
            from marin.execution.estimate import estimate_plan

            plan.estimate = estimate_plan(plan, self.max_parallel)
            self._check_budget(plan.estimate)
            self.check_resources(plan)
        self.reporter.planned(plan)
        outcomes: dict[int, StepOutcome] = {}
        for pos, p in enumerate(plan.steps):
            if p.action is Action.CACHED:
                outcomes[pos] = StepOutcome.of(p, Outcome.CACHED, note=p.env_note)
            elif p.action is Action.UNNEEDED:
                outcomes[pos] = StepOutcome.of(p, Outcome.UNNEEDED)
            elif self.dry_run:
                note = f"would {p.action.value}" if p.action in (Action.FETCH, Action.REUSE) else None
                outcomes[pos] = StepOutcome.of(p, Outcome.WOULD_RUN, reasons=[str(r) for r in p.reasons], note=note)
        if not self.dry_run and plan.to_do():
            self._execute(plan, outcomes)
        return RunResult([outcomes[i] for i in range(len(plan.steps))], self.store.prefix, plan)

    def _worker_kind(self) -> WorkerKind:
        from fray.cluster import LocalClient
        from fray.inprocess import InProcessClient

        if self._client is not None:
            if isinstance(self._client, InProcessClient):
                return WorkerKind.IN_PROCESS
            return WorkerKind.LOCAL_PROCESS if isinstance(self._client, LocalClient) else WorkerKind.REMOTE
        if fs.protocol_of(self.prefix) == "memory":
            return WorkerKind.IN_PROCESS
        return WorkerKind.LOCAL_PROCESS if self.backend is Backend.LOCAL else WorkerKind.REMOTE

    def _runs_on_this_machine(self) -> bool:
        """True when steps run here (admitted against this machine's capacity)."""
        return self._worker_kind() is not WorkerKind.REMOTE

    def _admission_controller(self) -> AdmissionController:
        if self._admission is None:
            from iris.admission import AdmissionController

            self._admission = AdmissionController(self._capacity)
        return self._admission

    def _check_budget(self, estimate: Any) -> None:
        """Raise ``OverBudget`` when the estimate exceeds a budget this runner was given."""
        if self.budget_s is None and self.budget_accelerator_hours is None:
            return
        from marin.execution.estimate import OverBudget, over_budget

        why = over_budget(estimate, seconds=self.budget_s, accelerator_hours=self.budget_accelerator_hours)
        if why is not None:
            raise OverBudget(why)
        if estimate.unknown:
            logger.warning("the budget covers only the steps with an estimate; never built before: %s",
                           ", ".join(estimate.names[pos] for pos in estimate.unknown))

    def check_resources(self, plan: Plan) -> None:
        """Refuse, before anything runs, a step that needs more than this machine has at all.

        Only for steps that run here (the local backend); on Ray the cluster's scheduler decides.

        Raises:
            iris.admission.ResourcesTooLarge: naming the step and the resource it lacks.
        """
        if not self._runs_on_this_machine():
            self._check_cluster_resources(plan)
            return
        from iris.admission import ResourcesTooLarge

        controller = self._admission_controller()
        for p in plan.to_run():
            try:
                controller.check_fits(resources_of(p.step))
            except ResourcesTooLarge as e:
                raise ResourcesTooLarge(f"step {p.name}: {e}") from None

    def _check_cluster_resources(self, plan: Plan) -> None:
        """On Ray: refuse a step no set of the cluster's live nodes could ever run (it would wait
        for room forever). Only clients that can list their nodes are checked."""
        nodes = getattr(self._client_or_default(), "nodes", None)
        if nodes is None:
            return
        from iris.admission import MachineCapacity, ResourcesTooLarge, check_fits_cluster

        hosts = [MachineCapacity(cpus=float(n.get("CPU", 0)), memory=int(n.get("memory", 0)),
                                 gpus=int(n.get("GPU", 0)), tpu_chips=int(n.get("TPU", 0)))
                 for n in nodes() if n.get("CPU", 0) > 0]
        for p in plan.to_run():
            try:
                check_fits_cluster(resources_of(p.step), hosts, what="the Ray cluster")
            except ResourcesTooLarge as e:
                raise ResourcesTooLarge(f"step {p.name}: {e}") from None

    def _warm_pool(self) -> Any:
        if self._pool is None:
            from fray.pool import PoolConfig, WorkerPool

            self._pool = WorkerPool(PoolConfig(max_calls=self.config.warm_worker_max_steps))
        return self._pool

    def close(self) -> None:
        """Shut down the client this runner made (a Ray connection, local log folders, warm workers)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        if self._client is not None and self._owns_client:
            self._client.shutdown()
            self._client = None
            self._owns_client = False

    def _client_or_default(self) -> DistributedClient:
        if self._client is None:
            kind = self._worker_kind()
            if kind is WorkerKind.IN_PROCESS:
                # memory:// exists only inside this process: a step run in a process of its own
                # would write into a store nobody else sees, and its empty output would be
                # published as done. So memory:// steps run here.
                from fray.inprocess import InProcessClient

                self._client = InProcessClient()
                return self._client
            if kind is WorkerKind.REMOTE:
                from fray.cluster import RayClient

                self._client = RayClient(address=self.ray_address)
            else:
                from fray.cluster import LocalClient

                self._client = LocalClient()
            self._owns_client = True
        return self._client

    def _attempt_context(self) -> AttemptContext:
        client = self._client_or_default()
        from fray.cluster import LocalClient

        warm = self.warm_workers and isinstance(client, LocalClient)
        return AttemptContext(self.holder, client, self._worker_kind(), self.strict_env, self._env,
                              places=tuple(self._places()), prefix=self.store.prefix,
                              pool=self._warm_pool if warm else None)

    def _execute(self, plan: Plan, outcomes: dict[int, StepOutcome]) -> None:
        pending = [pos for pos, p in enumerate(plan.steps) if p.action in (Action.RUN, Action.FETCH, Action.REUSE)]
        running: dict[int, StepAttempt] = {}
        waiting_on: dict[int, str] = {}
        paths = plan.paths()

        def settle(pos: int, outcome: StepOutcome) -> None:
            outcomes[pos] = outcome
            self.reporter.finished(outcome)

        try:
            while pending or running:
                progressed = False
                for pos in list(pending):
                    p = plan.steps[pos]
                    dep_outcomes = [outcomes.get(d) for d in p.deps]
                    failed = [plan.steps[d].name for d, o in zip(p.deps, dep_outcomes, strict=True)
                              if o is not None and o.outcome in _FAILED]
                    if failed:
                        settle(pos, StepOutcome.of(p, Outcome.UPSTREAM_FAILED, reasons=[str(r) for r in p.reasons],
                                                   error=f"upstream failed: {', '.join(failed)}"))
                        pending.remove(pos)
                        progressed = True
                        continue
                    # A fetch copies a finished output whole: it waits for no inputs.
                    if p.action is not Action.FETCH and not all(
                        o is not None and o.outcome in _BUILT for o in dep_outcomes
                    ):
                        continue
                    if len(running) >= self.max_parallel:
                        break
                    admission = self._try_admit(p, pos, settle)
                    if admission is None:
                        if pos in outcomes:
                            pending.remove(pos)
                            progressed = True
                        continue  # no room now: a smaller step may still fit
                    before = len(pending)
                    started = self._try_start(plan, pos, paths, outcomes, settle, waiting_on, pending)
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
                    attempt = running[pos]
                    attempt.poll()
                    if not attempt.done():
                        continue
                    progressed = True
                    if attempt.retry():
                        continue
                    try:
                        outcome = attempt.finish(plan)
                    finally:
                        attempt.admission.release()
                    del running[pos]
                    if outcome is None:
                        pending.append(pos)  # lost the lease: wait for whoever holds it now
                    else:
                        settle(pos, outcome)
                if not progressed and not running and not waiting_on and pending:
                    stuck = ", ".join(plan.steps[pos].name for pos in pending[:5])
                    raise RuntimeError(f"scheduler stalled with no step runnable: {stuck}")
                if not progressed:
                    self.reporter.tick([a.planned for a in running.values()])
                    if self._pool is not None and running:
                        self._pool.wait_any(self.poll_interval)  # wakes when a warm step ends
                    else:
                        time.sleep(self.poll_interval)
        except BaseException:
            for pos, attempt in running.items():
                attempt.admission.release()
                outcomes[pos] = attempt.cancel()
            for pos in pending:
                outcomes.setdefault(pos, StepOutcome.of(plan.steps[pos], Outcome.INTERRUPTED))
            raise

    def _try_admit(self, p: PlannedStep, pos: int, settle: _Settle) -> Releasable | None:
        """Room on this machine for ``p`` (an iris ``Admission`` to release when it ends), or None.

        A step that needs nothing admitted here (a fetch, or any step on Ray) gets a no-op token.
        A step that can never fit fails (it was checked at plan time unless a refused cache entry
        brought it into the run later).
        """
        if p.action is not Action.RUN or not self._runs_on_this_machine():
            return NothingHeld()
        from iris.admission import ResourcesTooLarge

        try:
            return self._admission_controller().try_admit(resources_of(p.step))
        except (ResourcesTooLarge, TypeError) as e:
            settle(pos, StepOutcome.of(p, Outcome.FAILED, reasons=[str(r) for r in p.reasons],
                                       error=f"step {p.name}: {e}" if isinstance(e, ResourcesTooLarge) else str(e)))
            return None

    def _try_start(self, plan: Plan, pos: int, paths: dict[int, str], outcomes: dict[int, StepOutcome],
                   settle: _Settle, waiting_on: dict[int, str], pending: list[int]) -> StepAttempt | None:
        p = plan.steps[pos]
        record = StepRecord(p.output_path)
        forced = any(r.kind is ReasonKind.FORCED for r in p.reasons)
        # The plan found it not done a moment ago; look again only while waiting on another runner
        # (and, below, once the lease is ours: that check is what makes publishing safe).
        if not forced and pos in waiting_on and record.is_done():
            settle(pos, StepOutcome.of(p, Outcome.CACHED, note="built by another runner" if pos in waiting_on else None))
            return None
        lease = Lease.acquire(record.meta, ttl=self.lease_ttl, holder=self.holder)
        if lease is None:
            info = current_lease(record.meta)
            holder = info.holder if info else "?"
            if waiting_on.get(pos) != holder:
                waiting_on[pos] = holder
                self.reporter.waiting(p, holder)
            return None
        # Somebody may have published between our check and our lease (the lease's listing of
        # .marin/ shows it).
        if not forced and record_listed(record.success, lease):
            lease.clear()
            settle(pos, StepOutcome.of(p, Outcome.CACHED, note="built by another runner"))
            return None
        if p.action is Action.FETCH:
            if fetch_from_cache(plan, pos, lease, self.store.prefix):
                source = p.cache_hit.cache if p.cache_hit is not None else "a cache"
                settle(pos, StepOutcome.of(p, Outcome.CACHED, note=f"fetched from {source}"))
                return None
            # The cache entry was refused: build it here, its inputs first.
            p.action = Action.RUN
            p.reasons = [Reason(ReasonKind.NEW, "cache entry refused; rebuilding")]
            if self._activate_inputs(plan, pos, outcomes, pending):
                lease.release()
                return None
        if not forced and (p.action is Action.REUSE
                           or (self.early_cutoff and realisable(plan, p, self._places()))):
            if publish_copy(plan, pos, lease, self.store.prefix, lambda: copy_realisation(plan, p),
                            f"building {p.output_name} instead"):
                settle(pos, StepOutcome.of(p, Outcome.REUSED, reasons=[str(r) for r in p.reasons]))
                return None
            p.action = Action.RUN
            p.reasons = [Reason(ReasonKind.NEW, "the earlier build it could reuse was refused; building")]
        clear = forced and pos not in waiting_on
        # What a forced rebuild replaces, to compare the new build with (nondeterminism).
        replaced = snapshot_build(record) if clear else None
        started = StepAttempt.start(p, lease, self._attempt_context(), paths, clear=clear)
        if isinstance(started, StepOutcome):
            settle(pos, started)
            return None
        started.replaced = replaced
        self.reporter.started(p)
        return started

    def _places(self) -> list[str]:
        """Where earlier builds may be found: this prefix, then the caches."""
        return [self.store.prefix, *self.caches]

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
                outcomes[d] = StepOutcome.of(q, Outcome.CACHED)
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
