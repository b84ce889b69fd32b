"""Gather everything a report shows from a plan (or a run's result) and the step store."""

from __future__ import annotations

from typing import Any

from marin.execution.core.encoding import config_to_json
from marin.execution.core.identity import fn_identity
from marin.execution.plan.model import Action, Plan, PlannedStep
from marin.execution.run.outcome import Outcome, RunResult, StepOutcome
from marin.execution.store.provenance_record import Provenance
from marin.execution.store.status_record import BuildState, StatusRecord
from marin.execution.store.step_record import StepRecord
from marin.execution.store.store import StepStore
from marin.report.curves import metrics_json
from marin.report.model import ReportData, ReportStep, StepState
from marin.report.outputs import (
    INDEX_FILE,
    MEMORY_FILE,
    METRICS_FILE,
    SUMMARY_FILE,
    read_data_summary,
    read_log_tail,
    read_memory,
    read_metrics,
    read_tokenized,
)

__all__ = ["ReportData", "ReportStep", "StepState", "collect_plan", "collect_run", "collect_store"]


_FROM_OUTCOME = {
    Outcome.CACHED: StepState.CACHED,
    Outcome.RAN: StepState.RAN,
    Outcome.REUSED: StepState.CACHED,  # an earlier build over the same input content, copied in
    Outcome.FAILED: StepState.FAILED,
    Outcome.UPSTREAM_FAILED: StepState.UPSTREAM_FAILED,
    Outcome.WOULD_RUN: StepState.WOULD_RUN,
    Outcome.INTERRUPTED: StepState.INTERRUPTED,
    Outcome.UNNEEDED: StepState.UNNEEDED,
}

# States whose log tail is worth embedding (the log explains them).
_LOG_STATES = (StepState.FAILED, StepState.INTERRUPTED, StepState.RUNNING)


def _reason_lines(reasons: Any) -> list[str]:
    """Provenance reasons (``{"kind", "detail"}`` records) as one line each."""
    lines = []
    for r in reasons or []:
        if isinstance(r, dict):
            kind = str(r.get("kind", "")).replace("_", " ")
            detail = r.get("detail")
            lines.append(f"{kind}: {detail}" if detail else kind)
        else:
            lines.append(str(r))
    return lines


def _state_from_store(planned: PlannedStep) -> StepState:
    """The state of a planned step judged from the store alone (no run in hand)."""
    if planned.action is Action.CACHED:
        return StepState.CACHED
    if planned.action is Action.UNNEEDED:
        return StepState.UNNEEDED
    stored = StepRecord(planned.output_path).read_status().state
    if stored is BuildState.FAILED:
        return StepState.FAILED
    if stored is BuildState.RUNNING:
        return StepState.RUNNING
    return StepState.WOULD_RUN


def _state_of(planned: PlannedStep | None, outcome: StepOutcome | None) -> StepState:
    """What the run did with the step, else what the store says of the planned step."""
    if outcome is not None:
        return _FROM_OUTCOME[outcome.outcome]
    if planned is not None:
        return _state_from_store(planned)
    return StepState.WOULD_RUN


def _cached_in_run(planned: PlannedStep, outcome: StepOutcome, paths: dict[int, str]) -> ReportStep:
    """A step a run found built (or did not need): what the plan and the run say, nothing read.

    A run's report says what the run did; what a cached step's build recorded is in `marin report`.
    Reading it here would cost a no-op run on gs:// requests per step.
    """
    return ReportStep(name=planned.name, hash=planned.hash, output_path=planned.output_path,
                      state=_FROM_OUTCOME[outcome.outcome], deps=list(planned.deps), reasons=list(outcome.reasons),
                      fn=fn_identity(planned.step.fn), version=planned.step.version,
                      config=config_to_json(planned.step.config, paths), note=outcome.note or planned.env_note)


def _add_plan(step: ReportStep, planned: PlannedStep, paths: dict[int, str]) -> None:
    """What the plan says of the step: its dependencies, why it would run, its function and config."""
    step.deps = list(planned.deps)
    step.reasons = [str(r) for r in planned.reasons]
    step.fn = fn_identity(planned.step.fn)
    step.version = planned.step.version
    step.config = config_to_json(planned.step.config, paths)
    step.note = planned.env_note


def _add_outcome(step: ReportStep, outcome: StepOutcome) -> None:
    """What the run says of the step (the plan's reasons and note first)."""
    step.reasons = step.reasons or list(outcome.reasons)
    step.note = outcome.note or step.note
    step.log_path = outcome.log_path


def _add_provenance(step: ReportStep, provenance: Provenance) -> None:
    """What a finished build recorded: how it was made, where, when, and how much it wrote (the
    plan's function, version and config first)."""
    step.fn = step.fn or provenance.fn
    step.version = step.version or provenance.version
    if step.config is None:
        step.config = provenance.config
    step.environment = provenance.environment
    step.started_at = provenance.started_at
    step.finished_at = provenance.finished_at
    step.duration_s = provenance.duration_s
    step.attempts = provenance.attempts
    step.host = provenance.host
    step.built_because = _reason_lines(provenance.reasons)
    step.output_bytes = provenance.output_bytes
    step.output_files = provenance.output_files


def _add_build(step: ReportStep, record: StepRecord, outcome: StepOutcome | None) -> None:
    """What is known of a finished build: its provenance, else its size from its manifest, and the
    time the run measured when its provenance has none."""
    built = outcome.provenance if outcome is not None else None  # this run built it: no need to read back
    provenance = built if built is not None else record.read_provenance()
    if provenance is not None:
        _add_provenance(step, provenance)
    if step.output_bytes is None:
        manifest = record.read_json(record.manifest)
        if manifest is not None and isinstance(manifest.get("total_bytes"), int):
            step.output_bytes = manifest["total_bytes"]
            step.output_files = len(manifest.get("files") or [])
    if step.state is StepState.RAN and step.duration_s is None and outcome is not None:
        step.duration_s = outcome.duration


def _add_attempt(step: ReportStep, record: StepRecord, outcome: StepOutcome | None) -> None:
    """What a failed, interrupted or running attempt left: its error (the run's first, then its
    status record's), its attempt number and when it stopped."""
    status = record.read_status_record() or StatusRecord()
    step.error = (outcome.error if outcome is not None else None) or status.error
    step.traceback = (outcome.traceback if outcome is not None else None) or status.traceback
    step.attempts = status.attempt if status.attempt > 0 else step.attempts
    step.finished_at = status.time if step.state is not StepState.RUNNING else None
    if outcome is not None and outcome.duration is not None:
        step.duration_s = outcome.duration


def _add_outputs(step: ReportStep, record: StepRecord, outcome: StepOutcome | None) -> None:
    """What the step wrote that a report shows: its metrics, memory, tokenized index, data summary."""
    # A step this run built has its manifest in hand: a file it does not list is not there.
    files = {f["path"] for f in outcome.manifest["files"]} if outcome is not None and outcome.manifest else None
    if files is not None and not files & {METRICS_FILE, MEMORY_FILE, INDEX_FILE, SUMMARY_FILE}:
        return
    at = record.files_folder(current=True)  # its folder, or the attempt folder its records name
    metrics = read_metrics(at) if files is None or METRICS_FILE in files else None
    step.metrics = metrics_json(metrics) if metrics is not None else None
    step.memory = read_memory(at) if files is None or MEMORY_FILE in files else None
    tokenized = read_tokenized(at) if files is None or INDEX_FILE in files else None
    step.tokenized = tokenized.to_json() if tokenized is not None else None
    step.data = read_data_summary(at) if files is None or SUMMARY_FILE in files else None


def _build_step(planned: PlannedStep | None, outcome: StepOutcome | None, paths: dict[int, str]) -> ReportStep:
    """One step of the report: what the plan and the run say of it, what its build or its newest
    attempt recorded, and what it wrote."""
    if outcome is not None and outcome.outcome in (Outcome.CACHED, Outcome.UNNEEDED) and planned is not None:
        return _cached_in_run(planned, outcome, paths)
    where = planned if planned is not None else outcome
    assert where is not None
    step = ReportStep(name=where.name, hash=where.hash, output_path=where.output_path,
                      state=_state_of(planned, outcome))
    record = StepRecord(step.output_path)
    if planned is not None:
        _add_plan(step, planned, paths)
    if outcome is not None:
        _add_outcome(step, outcome)
    if step.state in (StepState.CACHED, StepState.RAN):
        _add_build(step, record, outcome)
    if step.state in (StepState.FAILED, StepState.INTERRUPTED, StepState.RUNNING):
        _add_attempt(step, record, outcome)
    elif step.state is StepState.UPSTREAM_FAILED and outcome is not None:
        step.error = outcome.error
    if step.state in _LOG_STATES:
        step.log_path = step.log_path or record.log
        step.log_tail = read_log_tail(step.log_path)
    _add_outputs(step, record, outcome)
    return step


def _deps_from_provenance(steps: list[ReportStep]) -> None:
    """Without a plan, link steps through the dependency hashes their provenance records."""
    by_hash = {s.hash: i for i, s in enumerate(steps)}
    for s in steps:
        provenance = StepRecord(s.output_path).read_provenance()
        deps = [by_hash.get(d.hash) for d in provenance.dependencies] if provenance is not None else []
        s.deps = sorted({d for d in deps if d is not None})


def _current_environment() -> dict[str, Any]:
    from marin.execution.store.environment import current_environment

    return current_environment()[0]


def _comparison(plan: Plan | None, steps: list[ReportStep]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The comparison of the plan's training steps (None when it has none) and the views drawn from
    it (:mod:`marin.report.views`). A compared step whose curves the report did not read (cached
    in a run) gets the metrics the table read."""
    if plan is None:
        return None, None
    from marin.report.compare import compare_plan
    from marin.report.views import collect_views

    comparison = compare_plan(plan)
    by_hash = {s.hash: s for s in steps}
    for row in comparison.rows:
        step = by_hash.get(row.hash)
        if step is not None and step.metrics is None and row.series is not None:
            step.metrics = metrics_json(row.series)
    return (comparison.to_json() if comparison.rows else None), collect_views(plan, comparison)


def collect_plan(plan: Plan, title: str = "Experiment report") -> ReportData:
    """The report of a plan: each step's state as the store shows it now.

    A step the plan would run is shown as failed when its last attempt failed (with the error),
    as running when a live runner holds it, and as would-run otherwise.
    """
    paths = plan.paths()
    steps = [_build_step(p, None, paths) for p in plan.steps]
    comparison, views = _comparison(plan, steps)
    return ReportData(title=title, prefix=plan.store.prefix, source="plan", steps=steps,
                      environment=_current_environment(), comparison=comparison, views=views)


def collect_store(store: StepStore, title: str = "Store") -> ReportData:
    """Every finished step of ``store`` (its done index), linked through their provenance."""
    from marin.execution.store.done_index import read_index

    steps = []
    for output_name in sorted(read_index(store.prefix)):
        record = StepRecord(store.output_path(output_name))
        provenance = record.read_provenance()
        if provenance is None or provenance.name is None or provenance.hash is None:
            continue  # a build whose record is damaged: nothing to show of it
        step = ReportStep(name=provenance.name, hash=provenance.hash, output_path=record.output_path,
                          state=StepState.CACHED)
        _add_provenance(step, provenance)
        _add_outputs(step, record, None)
        steps.append(step)
    _deps_from_provenance(steps)
    return ReportData(title=title, prefix=store.prefix, source="store", steps=steps,
                      environment=_current_environment())


def collect_run(result: RunResult, title: str = "Run report") -> ReportData:
    """The report of a run: each step's outcome in that run, with what the store holds for it."""
    plan = result.plan
    if plan is not None and len(plan.steps) == len(result.steps):
        paths = plan.paths()
        steps = [_build_step(p, o, paths) for p, o in zip(plan.steps, result.steps, strict=True)]
        if plan.estimate is not None:
            for pos, estimate in plan.estimate.steps.items():
                steps[pos].estimate_s = estimate.seconds
                steps[pos].estimate_basis = estimate.basis
    else:
        steps = [_build_step(None, o, {}) for o in result.steps]
        _deps_from_provenance(steps)
    comparison, views = _comparison(plan, steps)
    return ReportData(title=title, prefix=result.prefix, source="run", steps=steps,
                      environment=_current_environment(), comparison=comparison, views=views)
