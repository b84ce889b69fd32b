"""``marin.execution.artifact_step``: Marin's ``ArtifactStep`` (defined in :mod:`marin.execution.compat`)."""

from marin.execution.compat.artifact_step import ArtifactStep, StepContext

__all__ = ["ArtifactStep", "StepContext"]
