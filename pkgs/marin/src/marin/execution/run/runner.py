"""The Make-style runner: build what is missing, reuse what is built, each distinct hash once.

This module is the runner's API: configuration, planning, the checks before anything runs and
the clients steps run on. The loop is :mod:`marin.execution.run.scheduler`, what changes during a
run :mod:`marin.execution.run.state`, one step's attempt :mod:`marin.execution.run.attempt`, what
a run reports :mod:`marin.execution.run.outcome`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from marin.execution.core.placeholders import Placeholder
from marin.execution.plan.clashes import refuse_name_clashes
from marin.execution.plan.estimate import OverBudget, PlanEstimate, estimate_plan, over_budget
from marin.execution.plan.make import make_plan
from marin.execution.plan.model import Action, Plan, StoreView, reasons_of
from marin.execution.run import capture
from marin.execution.run.accelerator import host_accelerator
from marin.execution.run.attempt_context import WorkerKind
from marin.execution.run.backends import Backends
from marin.execution.run.outcome import NotCached, Outcome, QuietReporter, Reporter, RunResult, StepOutcome
from marin.execution.run.settings import RunSettings
from marin.execution.run.state import RunState
from marin.execution.store.done_index import apply_fixes
from marin.execution.store.store import StepStore
from rigging.config.discovery import MarinConfig
from rigging.lease import default_holder
from rigging.store_requests import request_counts

if TYPE_CHECKING:
    from fray.types import DistributedClient
    from iris.accelerator import HostAccelerator
    from iris.admission import MachineCapacity
    from marin.execution.core.step import Step
    from marin.execution.run.scheduler import Scheduling
    from marin.execution.store.run_roots import RunRoot

__all__ = ["NotCached", "Outcome", "Reporter", "RunResult", "RunSettings", "StepOutcome", "StepRunner"]

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
        config: the run's :class:`~marin.execution.run.settings.RunSettings`, or the configuration
            (``rigging.config.discovery.MarinConfig``) to make them from with the keywords
            (:meth:`RunSettings.of <marin.execution.run.settings.RunSettings.of>`); default: the
            discovered configuration.
        reporter: receives progress (the CLI's display); default: log lines.
        client: the ``fray`` client that runs each step in its own process; default: made from
            the settings' ``backend``.
        capacity: what this machine offers to local steps (an iris ``MachineCapacity``); default:
            detected.
        **settings: single settings over the configuration, by name (``prefix``, ``max_parallel``,
            ``force``, ``dry_run``, ``only``, ``lease_ttl``, ``strict_env``, ``caches``, ``backend``,
            ``ray_address``, ``poll_interval``, ``require_cached``, ``budget_s``,
            ``budget_accelerator_hours``, ``early_cutoff``, ``warm_workers``: what each means is
            :class:`~marin.execution.run.settings.RunSettings`'s); only with a configuration, not
            with ``RunSettings``.

    Local steps run in processes forked from a warm worker (``fray.pool``: imports paid once, each
    step still in a process of its own) unless ``warm_workers`` is off. Steps whose resources ask
    for an accelerator or several hosts always get a fresh process (devices to themselves; one JAX
    job across processes): :func:`marin.execution.run.attempt_context.warm_worker_can_run`. JAX on
    the CPU forks safely: the warm worker never starts JAX (an import that starts threads is left
    to each step's own process), so each step initialises it in its own process.
    """

    def __init__(self, config: RunSettings | MarinConfig | None = None, *, reporter: Reporter | None = None,
                 client: DistributedClient | None = None, capacity: MachineCapacity | None = None,
                 **settings: Any):
        if isinstance(config, RunSettings):
            if settings:
                raise TypeError(f"StepRunner(RunSettings, ...) takes no settings keywords (got {', '.join(sorted(settings))}); "
                                "make the settings with RunSettings.of(config, ...) instead")
        else:
            config = RunSettings.of(config, **settings)
        self.settings: RunSettings = config
        self.reporter: Reporter = reporter or QuietReporter()
        self.backends = Backends(config, client, capacity)
        self.store = StepStore(config.prefix)
        self.holder = default_holder()

    # -- planning ---------------------------------------------------------------------------
    def _env(self) -> tuple[dict[str, Any], str]:
        # Not at import: a no-op run without --strict-env never fingerprints the environment, and
        # importlib.metadata (zipfile, email, csv) is the largest import of the module.
        from marin.execution.store.environment import current_environment

        return current_environment()

    def _salt(self) -> str | None:
        """The environment digest every hash holds (``--strict-env``), or None."""
        return self._env()[1] if self.settings.strict_env else None

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
        # Code is looked at by `marin plan` (note_env) and by a run that rebuilds what changed: each
        # built step's provenance is read, which the no-op path of a run that only warns skips.
        code = self.settings.code_changes if note_env or self.settings.code_changes == "rebuild" else None
        plan = self._make_plan(steps, salt=salt, explain=explain, env_digest=env_digest if note_env else None,
                               code_changes=code)
        if estimate and plan.to_run():
            plan = plan.with_estimate(estimate_plan(plan, self.settings.max_parallel,
                                                    accelerator=self.backends.accelerator()))
        return plan

    def _make_plan(self, steps: Iterable[Placeholder], *, salt: str | None, explain: bool,
                   env_digest: str | None = None, view: StoreView | None = None, only: Sequence[str] | None = None,
                   code_changes: str | None = None) -> Plan:
        settings = self.settings
        return make_plan(steps, self.store, force=settings.force, only=settings.only if only is None else only,
                         salt=salt, explain=explain, env_digest=env_digest, caches=settings.caches,
                         early_cutoff=settings.early_cutoff, view=view, code_changes=code_changes,
                         expand_from_caches=not settings.cache_trusted_keys)

    def run(self, steps: Iterable[Placeholder]) -> RunResult:
        """Build every step of the graph that is not already built; see :class:`RunResult`.

        On a host with an accelerator, the run (this process, and every process it starts that is
        not admitted to the accelerator) sees it hidden (``iris.accelerator_env``) until it ends.

        A run with something to do holds a temporary GC root naming every output it planned until
        it ends (:mod:`marin.execution.store.run_roots`): a ``marin gc`` meanwhile spares them; one
        that removed while the run planned makes it plan again.
        """
        # Not at import: the standard library and fray's request types, for a run that may build.
        from iris.accelerator_env import accelerator_hidden

        steps = list(steps)
        with accelerator_hidden(self.hides()):
            try:
                return self._run(steps)
            finally:
                self.backends.end_accelerator_processes()  # the accelerator is free between runs

    def hides(self) -> HostAccelerator | None:
        """The accelerator this runner's process hides while it runs: the host's, when steps run in
        processes of their own (on this machine or elsewhere); None: nothing to hide (or steps run
        in this very process, memory://)."""
        kind = self.backends.worker_kind()
        if kind is WorkerKind.IN_PROCESS:
            return None
        return host_accelerator(self.settings) if kind is WorkerKind.REMOTE else self.backends.accelerator()

    def _run(self, steps: list[Placeholder]) -> RunResult:
        capture.offer(steps)  # `marin run FILE` takes the steps a script's __main__ block runs
        root = None if self.settings.dry_run else self._run_root()
        try:
            return self._run_held(steps, root, request_counts())
        finally:
            if root is not None:
                root.end()

    def _run_root(self) -> RunRoot:
        from marin.execution.store.run_roots import RunRoot  # not at import: a plan never takes one

        prefix = self.store.prefix

        def waiting(holder: str) -> None:
            logger.warning("waiting for a `marin gc` (%s) to finish removing from %s before planning", holder, prefix)

        return RunRoot(prefix, ttl=self.settings.lease_ttl, on_wait=waiting)

    def _held(self, root: RunRoot | None, plan: Plan) -> bool:
        """Whether ``plan`` may be run: nothing to do, or its outputs are held by the run's root and
        no collection removed since it was made (else it is made again)."""
        if root is None or not plan.to_do():
            return True
        try:
            if root.hold(p.output_name for p in plan.steps):
                return True
        except OSError as e:  # a store this user may read but not write: the run itself may need no write
            logger.warning("no temporary GC root under %s (%s: %s): a `marin gc` meanwhile may remove what this "
                           "run reads", self.store.prefix, type(e).__name__, e)
            return True
        logger.warning("a `marin gc` removed from %s while this run planned: planning again", self.store.prefix)
        return False

    def _run_held(self, steps: list[Placeholder], root: RunRoot | None,
                  requests_before: dict[str, Any]) -> RunResult:
        while True:
            if root is not None:
                root.before_planning()
            plan = self.plan(steps, explain=True, estimate=not self.settings.require_cached)
            # One name, one step: refused before anything is written, unless Marin's executor allows it.
            for clash in refuse_name_clashes(plan.name_clashes):
                logger.warning("%s", clash)
            plan = self._index_kept_current(plan)
            if self.settings.require_cached and plan.to_run():
                raise NotCached([p.output_name for p in plan.to_run()])
            if plan.to_run():
                self._check_budget(plan.estimate)
                self.check_resources(plan)
            if self._held(root, plan):
                break
        self.reporter.planned(plan)
        if (line := self.backends.process_line(plan.to_run())) is not None and not self.settings.dry_run:
            logger.info("%s", line)
        state = RunState(plan, on_settle=self.reporter.finished)
        known: dict[int, StepOutcome] = {}
        for pos, p in enumerate(plan.steps):
            if p.action is Action.CACHED:
                known[pos] = StepOutcome.of(p, Outcome.CACHED, note=p.env_note)
            elif p.action is Action.UNNEEDED:
                known[pos] = StepOutcome.of(p, Outcome.UNNEEDED)
            elif self.settings.dry_run:
                note = f"would {p.action.value}" if p.action in (Action.FETCH, Action.REUSE) else None
                known[pos] = StepOutcome.of(p, Outcome.WOULD_RUN, reasons=reasons_of(p.reasons), note=note)
        state.start(known)
        if state.pending:
            # Not at import: the scheduler brings attempts, workers and publishing (pickle, shutil,
            # tempfile), which a run with nothing to build never needs.
            from marin.execution.run.scheduler import execute

            execute(state, self._scheduling(root))
        final = state.current_plan()
        return RunResult([state.outcomes[i] for i in range(len(final.steps))], self.store.prefix, final,
                         store_requests=request_counts(since=requests_before))

    def _index_kept_current(self, plan: Plan) -> Plan:
        """``plan``, once what it found out of date in the done index is put right: a plan only
        reads the store, a run (not a dry run) keeps the index current, before the plan's steps start."""
        fixes = plan.view.take_index_fixes()
        if fixes and not self.settings.dry_run:
            apply_fixes(self.store.prefix, fixes)
        return plan

    def _check_budget(self, estimate: PlanEstimate | None) -> None:
        """Raise ``OverBudget`` when the estimate exceeds a budget this runner was given."""
        seconds, hours = self.settings.budget_s, self.settings.budget_accelerator_hours
        if estimate is None or (seconds is None and hours is None):
            return
        why = over_budget(estimate, seconds=seconds, accelerator_hours=hours)
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

    def _scheduling(self, root: RunRoot | None = None) -> Scheduling:
        from marin.execution.run.scheduler import Scheduling  # not at import: see run()

        backends, settings = self.backends, self.settings
        backends.make_gate(self.reporter.accelerator_wait)

        def plan_more(found: list[Step], view: StoreView | None) -> Plan:
            # What a step expands into is built whatever --only said: it is part of that step's build.
            while True:
                if root is not None:
                    root.before_planning()
                more = self._index_kept_current(self._make_plan(found, salt=self._salt(), explain=True, view=view,
                                                                only=()))
                if self._held(root, more):
                    return more
                view = None  # what the run's view listed may be gone: look again

        return Scheduling(
            settings=settings, holder=self.holder, reporter=self.reporter, admit=backends.admit,
            attempt_context=lambda: backends.attempt_context(self.holder, self._env),
            wait=lambda busy: backends.wait(busy, settings.poll_interval), plan_more=plan_more, gate=backends.gate)
