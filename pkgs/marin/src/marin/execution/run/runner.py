"""The Make-style runner: build what is missing, reuse what is built, each distinct hash once.

This module is the runner's API: configuration, planning, the checks before anything runs and
the clients steps run on. The loop is :mod:`marin.execution.run.scheduler`, what changes during a
run :mod:`marin.execution.run.state`, one step's attempt :mod:`marin.execution.run.attempt`, what
a run reports :mod:`marin.execution.run.outcome`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from marin.execution.core.placeholders import Placeholder
from marin.execution.plan.estimate import OverBudget, PlanEstimate, estimate_plan, over_budget
from marin.execution.plan.make import make_plan
from marin.execution.plan.model import Action, Plan, StoreView, reasons_of
from marin.execution.run import capture
from marin.execution.run.backends import Backends
from marin.execution.run.outcome import NotCached, Outcome, QuietReporter, Reporter, RunResult, StepOutcome
from marin.execution.run.state import RunState
from marin.execution.store.done_index import apply_fixes
from marin.execution.store.store import StepStore
from rigging.config.discovery import Backend, MarinConfig, discover_config, replace
from rigging.lease import default_holder

if TYPE_CHECKING:
    from fray.types import DistributedClient
    from iris.admission import MachineCapacity
    from marin.execution.run.scheduler import Scheduling

__all__ = ["NotCached", "Outcome", "Reporter", "RunResult", "StepOutcome", "StepRunner"]

logger = logging.getLogger(__name__)

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
        lease_ttl: seconds a lease lives without a heartbeat before another runner may take over;
            default from the configuration (``lease_ttl``, 60 s).
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
            (``marin.execution.plan.estimate.OverBudget`` naming the steps that dominate).
        budget_accelerator_hours: refuse a plan estimated to use more accelerator-hours (all types).
        early_cutoff: reuse an earlier build of a step whose inputs were rebuilt with identical
            output (``marin.execution.store.realisations``); off, everything downstream of a rebuild runs.
        warm_workers: run local steps in processes forked from a warm worker (``fray.pool``:
            imports paid once, each step still in a process of its own) rather than in a fresh
            interpreter each (False); None: the configuration's ``warm_workers`` (on unless
            set off), with ``warm_worker_max_steps`` steps per warm worker. Steps whose
            resources ask for an accelerator or several hosts always get a fresh process
            (devices to themselves; one JAX job across processes): :func:`marin.execution.run.attempt_context.warm_worker_can_run`. JAX on the CPU
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
        lease_ttl: float | None = None,
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
        if config is not None and not isinstance(config, MarinConfig):
            raise TypeError(f"config must be a rigging MarinConfig, got {type(config).__name__} "
                            "(pass the prefix as prefix=...)")
        if max_parallel is not None and max_parallel < 1:
            raise ValueError(f"max_parallel must be >= 1, got {max_parallel}")
        if lease_ttl is not None and not lease_ttl > 0:
            raise ValueError(f"lease_ttl must be a positive number of seconds, got {lease_ttl}")
        overrides = {"prefix": prefix, "max_parallel": max_parallel, "strict_env": strict_env,
                     "caches": tuple(caches) if caches is not None else None, "backend": backend,
                     "ray_address": ray_address, "warm_workers": warm_workers, "lease_ttl": lease_ttl}
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
        self.lease_ttl = self.config.lease_ttl
        self.reporter: Reporter = reporter or QuietReporter()
        self.backends = Backends(self.config, client, capacity)
        self.poll_interval = poll_interval
        self.store = StepStore(self.prefix)
        self.holder = default_holder()
        self.require_cached = require_cached
        self.budget_s = budget_s
        self.budget_accelerator_hours = budget_accelerator_hours
        self.early_cutoff = early_cutoff
        self.warm_workers = self.config.warm_workers

    @property
    def backend(self) -> Backend:
        """Where steps run (a ``rigging.config.discovery.Backend``), from the configuration."""
        return self.config.backend

    # -- planning ---------------------------------------------------------------------------
    def _env(self) -> tuple[dict[str, Any], str]:
        # Not at import: a no-op run without --strict-env never fingerprints the environment, and
        # importlib.metadata (zipfile, email, csv) is the largest import of the module.
        from marin.execution.store.environment import current_environment

        return current_environment()

    def _salt(self) -> str | None:
        """The environment digest every hash holds (``--strict-env``), or None."""
        return self._env()[1] if self.strict_env else None

    def plan(self, steps: Iterable[Placeholder], *, explain: bool = True, note_env: bool = False,
             estimate: bool = False) -> Plan:
        """The plan for ``steps``: cached, or the reason each would run.

        Args:
            explain: give the reasons of the steps that would run.
            note_env: also say which cached steps were built in another environment (reads every
                cached step's provenance: for ``marin plan``, not for the no-op path of a run).
            estimate: estimate the steps that would run (from earlier builds' durations).
        """
        salt = self._salt()
        env_digest = salt if salt is not None else (self._env()[1] if note_env else None)
        plan = self._make_plan(steps, salt=salt, explain=explain, env_digest=env_digest if note_env else None)
        if estimate and plan.to_run():
            plan = plan.with_estimate(estimate_plan(plan, self.max_parallel))
        return plan

    def _make_plan(self, steps: Iterable[Placeholder], *, salt: str | None, explain: bool,
                   env_digest: str | None = None, view: StoreView | None = None, only: Sequence[str] | None = None
                   ) -> Plan:
        return make_plan(steps, self.store, force=self.force, only=self.only if only is None else only, salt=salt,
                         explain=explain, env_digest=env_digest, caches=self.caches,
                         early_cutoff=self.early_cutoff, view=view)

    def run(self, steps: Iterable[Placeholder]) -> RunResult:
        """Build every step of the graph that is not already built; see :class:`RunResult`."""
        steps = list(steps)
        capture.offer(steps)  # `marin run FILE` takes the steps a script's __main__ block runs
        plan = self._index_kept_current(self.plan(steps, explain=True, estimate=not self.require_cached))
        if self.require_cached and plan.to_run():
            raise NotCached([p.output_name for p in plan.to_run()])
        if plan.to_run():
            self._check_budget(plan.estimate)
            self.check_resources(plan)
        self.reporter.planned(plan)
        state = RunState(plan, on_settle=self.reporter.finished)
        known: dict[int, StepOutcome] = {}
        for pos, p in enumerate(plan.steps):
            if p.action is Action.CACHED:
                known[pos] = StepOutcome.of(p, Outcome.CACHED, note=p.env_note)
            elif p.action is Action.UNNEEDED:
                known[pos] = StepOutcome.of(p, Outcome.UNNEEDED)
            elif self.dry_run:
                note = f"would {p.action.value}" if p.action in (Action.FETCH, Action.REUSE) else None
                known[pos] = StepOutcome.of(p, Outcome.WOULD_RUN, reasons=reasons_of(p.reasons), note=note)
        state.start(known)
        if state.pending:
            # Not at import: the scheduler brings attempts, workers and publishing (pickle, shutil,
            # tempfile), which a run with nothing to build never needs.
            from marin.execution.run.scheduler import execute

            execute(state, self._scheduling())
        final = state.current_plan()
        return RunResult([state.outcomes[i] for i in range(len(final.steps))], self.store.prefix, final)

    def _index_kept_current(self, plan: Plan) -> Plan:
        """``plan``, once what it found out of date in the done index is put right: a plan only
        reads the store, a run (not a dry run) keeps the index current, before the plan's steps start."""
        fixes = plan.view.take_index_fixes()
        if fixes and not self.dry_run:
            apply_fixes(self.store.prefix, fixes)
        return plan

    def _check_budget(self, estimate: PlanEstimate | None) -> None:
        """Raise ``OverBudget`` when the estimate exceeds a budget this runner was given."""
        if estimate is None or (self.budget_s is None and self.budget_accelerator_hours is None):
            return
        why = over_budget(estimate, seconds=self.budget_s, accelerator_hours=self.budget_accelerator_hours)
        if why is not None:
            raise OverBudget(why)
        if estimate.unknown:
            logger.warning("the budget covers only the steps with an estimate; never built before: %s",
                           ", ".join(estimate.names[pos] for pos in estimate.unknown))

    def check_resources(self, plan: Plan) -> None:
        """Refuse, before anything runs, a step that needs more than it could ever get: on this
        machine (the local backend), or on the Ray cluster's live nodes.

        Raises:
            iris.admission.ResourcesTooLarge: naming the step and the resource it lacks.
        """
        self.backends.check_resources(plan.to_run())

    def close(self) -> None:
        """Shut down the client this runner made (a Ray connection, local log folders, warm workers)."""
        self.backends.close()

    def _scheduling(self) -> Scheduling:
        from marin.execution.run.scheduler import Scheduling  # not at import: see run()

        backends = self.backends
        places = (self.store.prefix, *self.caches)
        return Scheduling(
            max_parallel=self.max_parallel, poll_interval=self.poll_interval, lease_ttl=self.lease_ttl,
            holder=self.holder, prefix=self.store.prefix, caches=tuple(self.caches),
            early_cutoff=self.early_cutoff, reporter=self.reporter, admit=backends.admit,
            attempt_context=lambda: backends.attempt_context(self.holder, self.strict_env, self._env, places),
            wait=lambda busy: backends.wait(busy, self.poll_interval),
            # What a step expands into is built whatever --only said: it is part of that step's build.
            plan_more=lambda found, view: self._index_kept_current(
                self._make_plan(found, salt=self._salt(), explain=True, view=view, only=())))
