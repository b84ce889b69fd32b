"""A dataset in a training mixture (no heavy imports: experiment files name these)."""

from __future__ import annotations

import dataclasses

__all__ = ["DatasetSpec"]


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """One tokenized dataset in a training mixture."""

    path: str
    """Folder written by the tokenize step (holds ``index.json``), local or gs://."""
    weight: float = 1.0
    """Relative sampling weight (normalised over the mixture)."""

    def __post_init__(self) -> None:
        if not self.path:
            raise ValueError(f"path must be non-empty, got {self.path!r}")
        if not self.weight >= 0:
            raise ValueError(f"weight must be >= 0, got {self.weight}")
