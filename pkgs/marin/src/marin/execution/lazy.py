"""``marin.execution.lazy``: lazy handles (defined in :mod:`marin.execution.core.lazy`); Marin's
``ArtifactStep`` and ``StepContext`` (from :mod:`marin.execution.compat.artifact_step`)."""

from marin.execution.compat.artifact_step import ArtifactStep, StepContext
from marin.execution.core.lazy import Lazy, StepHandle, lower, lower_targets

__all__ = ["ArtifactStep", "Lazy", "StepContext", "StepHandle", "lower", "lower_targets"]
