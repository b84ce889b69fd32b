"""Steps, hashing, lazy handles, the plan and the runner.

Layers, each importing only itself and those before it: :mod:`~marin.execution.core` (steps,
placeholders, hashing, handles, traits: pure data), :mod:`~marin.execution.store` (records,
manifests, the done index, caches), :mod:`~marin.execution.plan` (the immutable plan, made in
phases), :mod:`~marin.execution.run` (the runner, its scheduler and state), and
:mod:`~marin.execution.compat` (Marin's executor API over the rest).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rigging.lazy import lazy_getattr

if TYPE_CHECKING:
    from marin.execution.core.errors import InvalidStep
    from marin.execution.core.lazy import Lazy, StepHandle, lower
    from marin.execution.core.placeholders import OutputPath, output_path_of
    from marin.execution.core.step import Step, unhashed_field
    from marin.execution.core.traits import ON_ACCELERATOR, PlanNote, Start, StepTraits, step_function
    from marin.execution.run.outcome import Outcome, RunResult, StepOutcome
    from marin.execution.run.runner import StepRunner

# Each name is imported from its module when first used: every module of the engine is inside this
# package, and importing one (a step's config type, the hasher) must not load the runner too.
_WHERE = {
    "InvalidStep": "marin.execution.core.errors",
    "Lazy": "marin.execution.core.lazy",
    "StepHandle": "marin.execution.core.lazy",
    "lower": "marin.execution.core.lazy",
    "OutputPath": "marin.execution.core.placeholders",
    "output_path_of": "marin.execution.core.placeholders",
    "Step": "marin.execution.core.step",
    "unhashed_field": "marin.execution.core.step",
    "ON_ACCELERATOR": "marin.execution.core.traits",
    "PlanNote": "marin.execution.core.traits",
    "Start": "marin.execution.core.traits",
    "StepTraits": "marin.execution.core.traits",
    "step_function": "marin.execution.core.traits",
    "Outcome": "marin.execution.run.outcome",
    "RunResult": "marin.execution.run.outcome",
    "StepOutcome": "marin.execution.run.outcome",
    "StepRunner": "marin.execution.run.runner",
}

__all__ = [
    "ON_ACCELERATOR",
    "InvalidStep",
    "Lazy",
    "Outcome",
    "OutputPath",
    "PlanNote",
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

__getattr__ = lazy_getattr(__name__, _WHERE)
