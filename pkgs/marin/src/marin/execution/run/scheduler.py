"""The scheduling loop: start each step once its inputs are built and there is room, poll what
runs, retry lost processes, publish what finished, until nothing is left to do.

It reads the plan and changes only the run's state (:class:`~marin.execution.run.state.RunState`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from marin.execution.core.errors import InvalidStep
from marin.execution.core.step import Step
from marin.execution.plan.expansion import expansion_of, merge_plans
from marin.execution.plan.model import Action, Plan, PlannedStep, StoreView, reasons_of
from marin.execution.run.accelerator import AcceleratorGate, found_accelerator_held
from marin.execution.run.attempt import StepAttempt
from marin.execution.run.attempt_context import AttemptContext, Releasable
from marin.execution.run.outcome import Outcome, Reporter, StepOutcome
from marin.execution.run.publish import (
    copy_realisation,
    fetch_from_cache,
    publish_copy,
    realisable,
    record_listed,
)
from marin.execution.run.settings import RunSettings
from marin.execution.run.state import RunState
from marin.execution.store.cache import find_in_caches
from marin.execution.store.realisations import snapshot_build
from marin.execution.store.step_record import StepRecord
from rigging.lease import Lease, current_lease

__all__ = ["Admit", "Scheduling", "execute"]

Admit = Callable[[PlannedStep], "Releasable | str | None"]
"""Room on this machine for a step: a hold to release when it ends, None when there is no room
now, or the text of why it can never run here."""


@dataclass(frozen=True)
class Scheduling:
    """What the loop needs from the runner that started it."""

    settings: RunSettings
    holder: str
    """Who this runner is, in the leases it takes."""
    reporter: Reporter
    admit: Admit
    attempt_context: Callable[[], AttemptContext]
    wait: Callable[[bool], None]
    """Wait a poll interval (``True``: steps run; a warm pool wakes when one ends)."""
    plan_more: Callable[[list[Step], StoreView], Plan]
    """Plan more targets as the run's plan was made (same options), reading the store through
    the run's view: what a built step expanded into."""
    gate: AcceleratorGate | None = None
    """Waits for an accelerator held by another process (none: nothing is checked)."""


def execute(state: RunState, s: Scheduling) -> None:
    """Run every pending step of ``state`` to an outcome (or leave it interrupted, and raise)."""
    try:
        while state.pending or state.running:
            progressed = _start_what_can_start(state, s)
            progressed = _finish_what_ended(state, s.gate) or progressed
            progressed = _expand_what_was_built(state, s) or progressed
            waiting = bool(state.waiting_on) or (s.gate is not None and s.gate.waiting)
            if not progressed and not state.running and not waiting and state.pending:
                stuck = ", ".join(state.plan.steps[pos].name for pos in itertools.islice(state.pending, 5))
                raise RuntimeError(f"scheduler stalled with no step runnable: {stuck}")
            if not progressed:
                s.reporter.tick([a.planned for a in state.running.values()])
                s.wait(bool(state.running))
    except BaseException:
        state.interrupt(_cancel)
        raise


def _cancel(attempt: StepAttempt) -> StepOutcome:
    attempt.admission.release()
    return attempt.cancel()


def _start_what_can_start(state: RunState, s: Scheduling) -> bool:
    progressed = False
    for pos in list(state.pending):
        p = state.entry(pos)
        failed = state.upstream_failed(pos)
        if failed:
            state.settle(pos, StepOutcome.of(p, Outcome.UPSTREAM_FAILED, reasons=reasons_of(p.reasons),
                                             error=f"upstream failed: {', '.join(failed)}"))
            progressed = True
            continue
        # A fetch copies a finished output whole: it waits for no inputs.
        if p.action is not Action.FETCH and not state.inputs_ready(pos):
            continue
        if len(state.running) >= s.settings.max_parallel:
            break
        admission = s.admit(p)
        if isinstance(admission, str):
            log = s.gate.last_log(p) if s.gate is not None else None  # an attempt that could not open the accelerator
            state.settle(pos, StepOutcome.of(p, Outcome.FAILED, reasons=reasons_of(p.reasons), error=admission,
                                             log_path=log))
            progressed = True
            continue
        if admission is None:
            continue  # no room now: a smaller step may still fit
        before = len(state.pending)
        started = _try_start(state, s, pos, admission)
        if len(state.pending) != before:
            progressed = True  # settled, or a refused cache entry brought its inputs into the run
        if started is not None:
            state.started(pos, started)
            progressed = True
        else:
            admission.release()
    return progressed


def _finish_what_ended(state: RunState, gate: AcceleratorGate | None = None) -> bool:
    progressed = False
    for pos in list(state.running):
        attempt = state.running[pos]
        attempt.poll()
        if not attempt.done():
            continue
        progressed = True
        if attempt.retry():
            continue
        held = found_accelerator_held(attempt) if gate is not None else None
        if gate is not None and held is not None:
            # Not the step's failure: the accelerator was taken by another process. It waits for
            # it, and starts again (a new attempt, not a retry).
            gate.found_held(attempt.planned, held, attempt.log.path)
            attempt.set_aside(f"the accelerator was held by another process ({held}); waiting to start again")
            attempt.admission.release()
            state.ended(pos, None)
            continue
        try:
            outcome = attempt.finish(state)
        finally:
            attempt.admission.release()
        state.ended(pos, outcome)  # None: lost the lease, wait for whoever holds it now
    return progressed


def _expand_what_was_built(state: RunState, s: Scheduling) -> bool:
    """Plan what each built expanding step's output decides and add it to the run
    (:mod:`marin.execution.plan.expansion`); a failed expansion fails the step."""
    progressed = False
    for pos in state.to_expand():
        p = state.entry(pos)
        progressed = True
        try:
            found = expansion_of(p.step, state.files_folder(pos))
            more = s.plan_more(found, state.plan.view)
        except InvalidStep as e:
            state.expansion_failed(pos, StepOutcome.of(p, Outcome.FAILED, reasons=reasons_of(p.reasons), error=str(e)))
            continue
        merged, mapping = merge_plans(state.plan, more)
        roots = sorted({mapping[more.position(step)] for step in found})
        before = len(state.plan.steps)
        state.extend(merged, pos, roots)
        s.reporter.expanded(p, merged, [merged.steps[q] for q in range(before, len(merged.steps))])
    return progressed


def _try_start(state: RunState, s: Scheduling, pos: int, admission: Releasable) -> StepAttempt | None:
    """Take the step's lease and act on it: settle it (built by another runner, fetched, reused)
    or start its attempt, holding ``admission``; None when it did not start."""
    p = state.entry(pos)
    record = StepRecord(p.output_path)
    forced = p.forced
    # The plan found it not done a moment ago; look again only while waiting on another runner
    # (and, below, once the lease is ours: that check is what makes publishing safe).
    if not forced and pos in state.waiting_on and record.is_done():
        state.settle(pos, StepOutcome.of(p, Outcome.CACHED, note="built by another runner"))
        return None
    lease = Lease.acquire(record.meta, ttl=s.settings.lease_ttl, holder=s.holder)
    if lease is None:
        info = current_lease(record.meta)
        holder = info.holder if info else "?"
        if state.wait_on(pos, holder):
            s.reporter.waiting(p, holder)
        return None
    # Somebody may have published between our check and our lease (the lease's listing of
    # .marin/ shows it).
    if not forced and record_listed(record.success, lease):
        lease.clear()
        state.settle(pos, StepOutcome.of(p, Outcome.CACHED, note="built by another runner"))
        return None
    if p.action is Action.FETCH:
        if fetch_from_cache(state, pos, lease, s.settings.cache_trusted_keys):
            source = p.cache_hit.cache if p.cache_hit is not None else "a cache"
            state.settle(pos, StepOutcome.of(p, Outcome.CACHED, note=f"fetched from {source}"))
            return None
        # The cache entry was refused: build it here, its inputs first.
        p = state.build_here(pos, "cache entry refused; rebuilding")
        if state.activate_inputs(pos, s.settings.caches, find_in_caches):
            lease.release()
            return None
    if not forced and (p.action is Action.REUSE or (s.settings.early_cutoff and realisable(state, pos, s.settings.places))):
        p = state.entry(pos)
        if publish_copy(state, pos, lease,
                        lambda: copy_realisation(state, pos, lease, s.settings.caches, s.settings.cache_trusted_keys),
                        f"building {p.output_name} instead"):
            state.settle(pos, StepOutcome.of(p, Outcome.REUSED, reasons=reasons_of(p.reasons)))
            return None
        p = state.build_here(pos, "the earlier build it could reuse was refused; building")
    clear = forced and pos not in state.waiting_on
    # What a forced rebuild replaces, to compare the new build with (nondeterminism).
    replaced = snapshot_build(record) if clear else None
    started = StepAttempt.start(p, lease, s.attempt_context(), state.input_paths(pos), clear=clear,
                                expansions=state.expanded_inputs(pos), admission=admission)
    if isinstance(started, StepOutcome):
        state.settle(pos, started)
        return None
    started.replaced = replaced
    s.reporter.started(p)
    return started
