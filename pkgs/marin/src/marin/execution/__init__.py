"""Steps, hashing, lazy handles, the plan and the runner."""

from marin.execution.lazy import Lazy, lower
from marin.execution.step import InvalidStep, OutputPath, Step, output_path_of, unhashed_field
from marin.execution.step_runner import Outcome, RunResult, StepOutcome, StepRunner

__all__ = [
    "InvalidStep",
    "Lazy",
    "Outcome",
    "OutputPath",
    "RunResult",
    "Step",
    "StepOutcome",
    "StepRunner",
    "lower",
    "output_path_of",
    "unhashed_field",
]
