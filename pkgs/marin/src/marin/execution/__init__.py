"""Steps, hashing, lazy handles, the plan and the runner.

Layers, each importing only itself and those before it: :mod:`~marin.execution.core` (steps,
placeholders, hashing, handles, traits: pure data), :mod:`~marin.execution.store` (records,
manifests, the done index, caches), :mod:`~marin.execution.plan` (the immutable plan, made in
phases), :mod:`~marin.execution.run` (the runner, its scheduler and state), and
:mod:`~marin.execution.compat` (Marin's executor API over the rest).
"""

from marin.execution.core.errors import InvalidStep
from marin.execution.core.lazy import Lazy, StepHandle, lower
from marin.execution.core.placeholders import OutputPath, output_path_of
from marin.execution.core.step import Step, unhashed_field
from marin.execution.core.traits import Start, StepTraits, step_function
from marin.execution.run.outcome import Outcome, RunResult, StepOutcome
from marin.execution.run.runner import StepRunner

__all__ = [
    "InvalidStep",
    "Lazy",
    "Outcome",
    "OutputPath",
    "RunResult",
    "Start",
    "Step",
    "StepHandle",
    "StepOutcome",
    "StepRunner",
    "StepTraits",
    "lower",
    "output_path_of",
    "step_function",
    "unhashed_field",
]
