"""What changes while a run goes on, beside its immutable plan.

The plan says what each step was found to need. During the run a step may turn out otherwise:
its cache entry is refused (it must be built here, its inputs with it), an earlier build of the
same inputs is found once its inputs are built (reuse), a finished build publishes its digest for
its dependents. :class:`RunState` holds those changes and the run's bookkeeping, and changes
only through its methods, as Ninja's ``Plan`` does; the plan itself is never modified.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import ChainMap
from collections.abc import Callable, KeysView, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

from marin.execution.core.graph import dependencies_of
from marin.execution.plan.expansion import closure, expands
from marin.execution.plan.model import Action, Plan, PlannedStep, Reason, ReasonKind
from marin.execution.run.outcome import Outcome, StepOutcome
from marin.execution.store.cache import CacheHit
from marin.execution.store.listings import in_parallel
from marin.execution.store.realisations import Realised, digest_of_build
from marin.execution.store.step_record import StepRecord

if TYPE_CHECKING:
    from marin.execution.run.attempt import StepAttempt

__all__ = ["RunState"]

_FAILED = (Outcome.FAILED, Outcome.UPSTREAM_FAILED)
_BUILT = (Outcome.CACHED, Outcome.RAN, Outcome.REUSED)


class RunState:
    """The run of one plan: each step's current entry and outcome, what waits, runs and was published.

    Args:
        plan: the plan being run (never modified).
        on_settle: called with each outcome as it is recorded (the reporter).
    """

    def __init__(self, plan: Plan, on_settle: Callable[[StepOutcome], None] = lambda outcome: None):
        self._plan = plan
        self._on_settle = on_settle
        self._entries: dict[int, PlannedStep] = {}
        self._published: dict[int, str] = {}
        self._files_folders: dict[int, str] = {}
        self._expansions: dict[int, tuple[int, ...]] = dict(plan.expansions)
        self._outcomes: dict[int, StepOutcome] = {}
        self._pending: dict[int, None] = {}  # an ordered set: the order steps are tried in
        self._running: dict[int, StepAttempt] = {}
        self._waiting_on: dict[int, str] = {}

    # -- views (read-only) -------------------------------------------------------------------
    @property
    def plan(self) -> Plan:
        """The run's plan: the one it started with, grown by what steps expanded into (:meth:`extend`)."""
        return self._plan

    @property
    def expansions(self) -> Mapping[int, tuple[int, ...]]:
        """Expanding steps whose expansion is known: position → the positions it expanded into."""
        return MappingProxyType(self._expansions)

    @property
    def outcomes(self) -> Mapping[int, StepOutcome]:
        """Position → outcome, of every step that has one."""
        return MappingProxyType(self._outcomes)

    @property
    def pending(self) -> KeysView[int]:
        """Positions of the steps still to start, in the order they are tried."""
        return self._pending.keys()

    @property
    def running(self) -> Mapping[int, StepAttempt]:
        """Position → attempt, of the steps running now."""
        return MappingProxyType(self._running)

    @property
    def waiting_on(self) -> Mapping[int, str]:
        """Steps another runner holds: position → the holder last seen."""
        return MappingProxyType(self._waiting_on)

    # -- queries ----------------------------------------------------------------------------
    @functools.cached_property
    def _paths(self) -> dict[int, str]:
        """``{id(step): output path}`` of every step object (for placeholders), made once (and
        grown with the plan, :meth:`extend`)."""
        return self._plan.paths()

    def files_folder(self, pos: int) -> str:
        """Where the build of the step at ``pos`` has its files: its output folder, or the attempt
        folder its success record names (:mod:`marin.execution.store.layout`); read once a run."""
        if pos not in self._files_folders:
            self._files_folders[pos] = StepRecord(self._plan.steps[pos].output_path).files_folder()
        return self._files_folders[pos]

    def input_paths(self, pos: int) -> Mapping[int, str]:
        """``{id(step): output path}`` of every step object, with each input of ``pos`` at where its build's files are: what the step
        at ``pos`` is handed. Where the steps its inputs expanded into have theirs is looked up
        too, side by side (:meth:`expanded_inputs` hands them over)."""
        p = self._plan.steps[pos]
        wanted = sorted({q for d in p.deps for q in (d, *closure(self._expansions, d))})
        found = dict(zip(wanted, in_parallel(self.files_folder, wanted), strict=True))
        # Its config's placeholders name the step objects it depends on.
        moved = {id(d): found[self._plan.pos_of[id(d)]] for d in dependencies_of(p.step)}
        return ChainMap(moved, self._paths)

    def entry(self, pos: int) -> PlannedStep:
        """The step at ``pos`` as the run now sees it (the plan's entry, or what the run changed)."""
        return self._entries.get(pos) or self._plan.steps[pos]

    def current_plan(self) -> Plan:
        """The plan with what the run changed (for the run's result and report)."""
        return self._plan.with_steps(self._entries) if self._entries else self._plan

    def digest_of(self, pos: int) -> str | None:
        """The output digest of the step at ``pos``: published in this run, else its success record's."""
        if pos in self._published:
            return self._published[pos]
        q = self._plan.steps[pos]
        return digest_of_build(q.output_path, q.step)

    def upstream_failed(self, pos: int) -> list[str]:
        """Names of the inputs of ``pos`` that failed (or whose own inputs did), and of the steps an
        expanding input expanded into that failed (its readers wait for all of them)."""
        failed = []
        for d in self._plan.steps[pos].deps:
            for q in (d, *sorted(closure(self._expansions, d))):
                if q in self._outcomes and self._outcomes[q].outcome in _FAILED:
                    failed.append(self._plan.steps[q].name)
        return failed

    def built(self, pos: int) -> bool:
        """True when the step at ``pos`` is built (cached, ran or reused in this run)."""
        return pos in self._outcomes and self._outcomes[pos].outcome in _BUILT

    def inputs_ready(self, pos: int) -> bool:
        """True when every input of ``pos`` is built, and, for an input whose output decides more
        steps, every step it expanded into (:mod:`marin.execution.plan.expansion`)."""
        for d in self._plan.steps[pos].deps:
            if not self.built(d):
                return False
            if expands(self._plan.steps[d].step):
                if d not in self._expansions or not all(self.built(q) for q in closure(self._expansions, d)):
                    return False
        return True

    def expanded_inputs(self, pos: int) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
        """For each input of ``pos`` that expanded: its output folder and the (name, output folder)
        of every step it expanded into, in plan order (handed to the running step)."""
        out = []
        for d in self._plan.steps[pos].deps:
            if d in self._expansions:
                found = sorted(closure(self._expansions, d))
                out.append((self.files_folder(d), tuple((self._plan.steps[q].name, self.files_folder(q)) for q in found)))
        return tuple(out)

    def to_expand(self) -> list[int]:
        """Built steps whose output decides more steps, not expanded yet."""
        return [pos for pos in self._outcomes if pos not in self._expansions and self.built(pos)
                and expands(self._plan.steps[pos].step)]

    # -- changes ----------------------------------------------------------------------------
    def start(self, outcomes: dict[int, StepOutcome]) -> None:
        """Begin with the outcomes known before anything runs; every other step to do is pending."""
        self._outcomes.update(outcomes)
        self._pending = dict.fromkeys(pos for pos, p in enumerate(self._plan.steps)
                                      if p.action in (Action.RUN, Action.FETCH, Action.REUSE) and pos not in outcomes)

    def settle(self, pos: int, outcome: StepOutcome) -> None:
        """Record the outcome of ``pos``; it is no longer pending or running."""
        self._outcomes[pos] = outcome
        self._pending.pop(pos, None)
        self._on_settle(outcome)

    def started(self, pos: int, attempt: StepAttempt) -> None:
        """The pending step at ``pos`` started: ``attempt`` runs it."""
        del self._pending[pos]
        self._running[pos] = attempt

    def ended(self, pos: int, outcome: StepOutcome | None) -> None:
        """The attempt running ``pos`` ended with ``outcome``; None: it lost its lease, and the step
        is pending again (waiting for whoever holds it now)."""
        del self._running[pos]
        if outcome is None:
            self._pending[pos] = None
        else:
            self.settle(pos, outcome)

    def wait_on(self, pos: int, holder: str) -> bool:
        """Another runner (``holder``) holds ``pos``; True when that is news (a new holder)."""
        if self._waiting_on.get(pos) == holder:
            return False
        self._waiting_on[pos] = holder
        return True

    def expansion_failed(self, pos: int, outcome: StepOutcome) -> None:
        """What the built step at ``pos`` expands into could not be planned: it expands into
        nothing, and fails with ``outcome``."""
        self._expansions[pos] = ()
        self.settle(pos, outcome)

    def interrupt(self, cancel: Callable[[StepAttempt], StepOutcome]) -> None:
        """The run is interrupted: each running attempt ends with what ``cancel`` returns, each
        pending step is interrupted (the reporter is told of neither)."""
        for pos, attempt in self._running.items():
            self._outcomes[pos] = cancel(attempt)
        for pos in self._pending:
            self._outcomes.setdefault(pos, StepOutcome.of(self.entry(pos), Outcome.INTERRUPTED))

    def published(self, pos: int, digest: str, files_folder: str) -> None:
        """``pos`` was published with this output digest, its files in ``files_folder``: its
        dependents read both from here."""
        self._published[pos] = digest
        self._files_folders[pos] = files_folder

    def build_here(self, pos: int, why: str) -> PlannedStep:
        """``pos`` must be built here after all (its cache entry or the earlier build it would
        reuse was refused): its entry becomes a run, with ``why``."""
        entry = dataclasses.replace(self.entry(pos), action=Action.RUN, reasons=(Reason(ReasonKind.NEW, why),),
                                    cache_hit=None, realised=None)
        self._entries[pos] = entry
        return entry

    def reuse_found(self, pos: int, realised: Realised, why: str) -> PlannedStep:
        """An earlier build over the same input content stands in for ``pos`` (found at its start)."""
        entry = dataclasses.replace(self.entry(pos), action=Action.REUSE, realised=realised,
                                    reasons=(Reason(ReasonKind.REUSE, why),))
        self._entries[pos] = entry
        return entry

    def extend(self, plan: Plan, expander: int, roots: Sequence[int]) -> None:
        """The run grows: ``plan`` is the run's plan with what the step at ``expander`` expanded into
        (``roots``, and what they read) merged in (:func:`~marin.execution.plan.expansion.merge_plans`:
        earlier positions kept). New steps are cached, unneeded or pending as the plan says."""
        old = self._plan
        self._plan = plan
        self._expansions.update({k: v for k, v in plan.expansions.items() if k not in self._expansions})
        self._expansions[expander] = tuple(roots)
        self._paths.update(plan.paths())
        for pos, p in enumerate(plan.steps):
            known = self._outcomes.get(pos)
            revived = known is not None and known.outcome is Outcome.UNNEEDED and p.action is not Action.UNNEEDED
            if pos < len(old.steps) and not revived:
                continue
            if revived:
                del self._outcomes[pos]
            if p.action is Action.CACHED:
                self._outcomes[pos] = StepOutcome.of(p, Outcome.CACHED, note=p.env_note)
            elif p.action is Action.UNNEEDED:
                self._outcomes[pos] = StepOutcome.of(p, Outcome.UNNEEDED)
            elif pos not in self._pending and pos not in self._running:
                self._pending[pos] = None

    def activate_inputs(self, pos: int, caches: Sequence[str],
                        find_in_caches: Callable[[str, Sequence[str]], CacheHit | None]) -> bool:
        """Bring the unneeded inputs of ``pos`` (which must now be built) into the run: each is
        found done, fetched from a cache, or built (and then its own inputs too). True if any were added."""
        added = False
        stack = list(self._plan.steps[pos].deps)
        while stack:
            d = stack.pop()
            o = self._outcomes.get(d)
            if o is None or o.outcome is not Outcome.UNNEEDED:
                continue
            del self._outcomes[d]
            q = self._plan.steps[d]
            if StepRecord(q.output_path).is_done():
                self._outcomes[d] = StepOutcome.of(q, Outcome.CACHED)
                continue
            hit = find_in_caches(q.output_name, caches) if caches else None
            reason = Reason(ReasonKind.UPSTREAM_CHANGED, f"needed to rebuild {self._plan.steps[pos].name}")
            self._entries[d] = dataclasses.replace(q, action=Action.FETCH if hit is not None else Action.RUN,
                                                   cache_hit=hit, reasons=(reason,))
            self._pending[d] = None
            added = True
            if hit is None:
                stack.extend(q.deps)
        return added
