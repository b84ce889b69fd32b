"""Datasets in a training mixture and the phases of its weights (no heavy imports: experiment files name these)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

__all__ = ["DatasetSpec", "MixturePhase", "mixture_schedule", "phase_spans"]


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """One tokenized dataset in a training mixture."""

    path: str
    """Folder written by the tokenize step (holds ``index.json``), local or gs://."""
    weight: float = 1.0
    """Relative sampling weight (normalised over the mixture); in a mixture with phases, its weight
    in the first phase (from step 0)."""

    def __post_init__(self) -> None:
        if not self.path:
            raise ValueError(f"path must be non-empty, got {self.path!r}")
        if not self.weight >= 0:
            raise ValueError(f"weight must be >= 0, got {self.weight}")


@dataclasses.dataclass(frozen=True)
class MixturePhase:
    """From training step ``start_step`` on, the mixture draws its datasets with these weights."""

    start_step: int
    """The first optimizer step (0-based: the step that trains on batch ``start_step``) of the phase."""
    weights: tuple[float, ...]
    """One relative weight per dataset of the mixture, in its order (normalised; 0 leaves one out)."""

    def __post_init__(self) -> None:
        if isinstance(self.start_step, bool) or not isinstance(self.start_step, int) or self.start_step < 0:
            raise ValueError(f"a phase's start_step must be an int >= 0, got {self.start_step!r}")
        if isinstance(self.weights, list):
            object.__setattr__(self, "weights", tuple(self.weights))
        if not isinstance(self.weights, tuple) or not self.weights:
            raise ValueError(f"a phase's weights must be a non-empty tuple, got {self.weights!r}")
        for w in self.weights:
            if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w < 0:
                raise ValueError(f"phase at step {self.start_step}: weights must be finite numbers >= 0, "
                                 f"got {list(self.weights)}")
        if not sum(self.weights) > 0:
            raise ValueError(f"phase at step {self.start_step}: weights must not all be 0, got {list(self.weights)}")
        object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))


def mixture_schedule(datasets: Sequence[DatasetSpec],
                     phases: Sequence[MixturePhase] = ()) -> list[tuple[int, tuple[float, ...]]]:
    """``[(start_step, normalised weights)]``: from step 0 the datasets' own weights, then each phase's."""
    out = []
    for start, weights in [(0, tuple(s.weight for s in datasets)), *((p.start_step, p.weights) for p in phases)]:
        total = sum(weights)
        out.append((start, tuple(w / total for w in weights)))
    return out


def phase_spans(schedule: Sequence[tuple[int, tuple[float, ...]]], first_step: int,
                last_step: int) -> list[tuple[int, int, tuple[float, ...]]]:
    """``[(start, end, weights)]``: the steps ``[first_step, last_step)`` cut where phases change
    (phases with no step in that range are left out)."""
    spans = []
    for i, (start, weights) in enumerate(schedule):
        end = schedule[i + 1][0] if i + 1 < len(schedule) else last_step
        lo, hi = max(start, first_step), min(end, last_step)
        if lo < hi:
            spans.append((lo, hi, weights))
    return spans
