"""``marin.execution.artifact``: Marin's ``Artifact`` (defined in :mod:`marin.execution.compat`)."""

from marin.execution.compat.artifact import Artifact

__all__ = ["Artifact"]
