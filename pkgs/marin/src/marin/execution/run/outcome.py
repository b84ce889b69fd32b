"""What a run reports: each step's outcome, the run's result, and the reporter that draws progress."""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from marin.execution.plan.model import Plan, PlannedStep
from marin.execution.store.provenance_record import Provenance

__all__ = ["NotCached", "Outcome", "QuietReporter", "Reporter", "RunResult", "StepOutcome"]

logger = logging.getLogger("marin.execution.step_runner")


class NotCached(RuntimeError):
    """``require_cached`` was set and some steps would have to be built; ``steps`` names them."""

    def __init__(self, steps: list[str]):
        shown = ", ".join(steps[:10]) + (f" and {len(steps) - 10} more" if len(steps) > 10 else "")
        super().__init__(f"{len(steps)} step(s) would have to be built: {shown}")
        self.steps = steps


class Outcome(enum.Enum):
    CACHED = "cached"
    RAN = "ran"
    REUSED = "reused"  # an earlier build over the same input content was copied in (early cutoff)
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
    # A step this run built: the provenance and manifest it published, so that the run's report
    # takes them from here instead of reading them back from the store (a request each on gs://).
    provenance: Provenance | None = field(default=None, repr=False, compare=False)
    manifest: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, planned: PlannedStep, outcome: Outcome, **details: Any) -> StepOutcome:
        """The outcome of a planned step (its name, hash and path) with ``details``."""
        return cls(planned.name, planned.hash, planned.output_path, outcome, **details)


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
    def accelerator_wait(self, planned: PlannedStep, line: str) -> None: ...
    def finished(self, outcome: StepOutcome) -> None: ...
    def tick(self, running: Sequence[PlannedStep]) -> None: ...
    def expanded(self, planned: PlannedStep, plan: Plan, added: Sequence[PlannedStep]) -> None: ...


class QuietReporter:
    """The default reporter: a log line per step."""

    def planned(self, plan: Plan) -> None:
        pass

    def started(self, planned: PlannedStep) -> None:
        logger.info("running %s", planned.output_name)

    def waiting(self, planned: PlannedStep, holder: str) -> None:
        logger.info("waiting for %s (held by %s)", planned.output_name, holder)

    def accelerator_wait(self, planned: PlannedStep, line: str) -> None:
        logger.warning("%s waits for the accelerator: %s", planned.output_name, line)

    def finished(self, outcome: StepOutcome) -> None:
        logger.info("%s %s", outcome.outcome.value, outcome.name)

    def tick(self, running: Sequence[PlannedStep]) -> None:
        pass

    def expanded(self, planned: PlannedStep, plan: Plan, added: Sequence[PlannedStep]) -> None:
        logger.info("%s expanded into %d more steps", planned.output_name, len(added))
