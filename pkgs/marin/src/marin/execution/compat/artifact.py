"""Marin's ``Artifact``: the base of what a step's output holds (for ``artifact_type=`` and annotations)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Artifact"]


@dataclass(frozen=True)
class Artifact:
    """A step's output folder, described. Steps here write files under their output folder;
    what ``run`` returns is not stored."""

