"""``marin.execution.step_runner``: the runner (defined in :mod:`marin.execution.run`)."""

from marin.execution.run.outcome import NotCached, Outcome, Reporter, RunResult, StepOutcome
from marin.execution.run.runner import StepRunner
from marin.execution.run.settings import RunSettings

__all__ = ["NotCached", "Outcome", "Reporter", "RunResult", "RunSettings", "StepOutcome", "StepRunner"]
