"""Where a run's data stream starts, and what its mixture gave it: tokens per dataset and per phase.

The mixture draws element ``n`` of the stream from a dataset chosen by ``(seed, n)`` and the weights
of ``n``'s phase (:class:`~levanter.data.packing.MixtureSchedule`); step ``t`` trains on elements
``[t * batch_size + offset, (t + 1) * batch_size + offset)``. A run with phases keeps ``offset`` at
0, so its phases change at the steps they name whatever it resumed, extended or branched from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from levanter.data.packing import MixtureSchedule
from levanter.data.spec import DatasetSpec, MixturePhase, mixture_schedule, phase_spans

__all__ = ["MixtureUsage", "PhaseUsage", "mixture_usage", "starting_data_state"]


def starting_data_state(fresh: dict[str, Any], saved: dict[str, Any] | None, *, step: int, batch_size: int,
                        phased: bool, branch: bool) -> dict[str, Any] | None:
    """The state a run's data iterator starts from (None: its fresh state as it is).

    Args:
        fresh: the iterator's state before it read anything.
        saved: the data position of the checkpoint the run starts from (None: from the beginning).
        step: the step the run starts at.
        batch_size: elements per step.
        phased: the mixture has phases: its element count is set to ``step * batch_size`` (after a
            ``reset_data_loader`` branch too), so every phase starts at the step it names.
        branch: the checkpoint is another run's; its mixture may have had fewer datasets, listed
            first: the new ones start at their beginning.

    Raises:
        ValueError: the checkpoint's data position does not fit this mixture's datasets.
    """
    if saved is None:
        return {**fresh, "count": step * batch_size} if phased and step else None
    parents = list(saved["parents"])
    wanted = len(fresh["parents"])
    if branch and len(parents) < wanted:
        parents += fresh["parents"][len(parents):]
    if len(parents) != wanted:
        raise ValueError(f"the checkpoint's data position is of a mixture of {len(saved['parents'])} datasets, "
                         f"this one has {wanted}: a branch lists its source's datasets first, in their order")
    count = step * batch_size if phased else int(saved["count"])
    return {**saved, "count": count, "parents": parents}


@dataclasses.dataclass(frozen=True)
class PhaseUsage:
    """The steps of one phase a run trained, and the tokens each dataset gave them."""

    start_step: int
    end_step: int
    """The step after its last."""
    weights: tuple[float, ...]
    """Its normalised weights, one per dataset."""
    tokens: tuple[int, ...]
    """Training tokens (``seq_len`` per window) drawn from each dataset."""


@dataclasses.dataclass(frozen=True)
class MixtureUsage:
    """What a run's mixture gave the steps ``[first_step, last_step)``."""

    datasets: tuple[str, ...]
    """The datasets' paths, in the mixture's order."""
    tokens: tuple[int, ...]
    """Training tokens drawn from each dataset over all those steps."""
    phases: tuple[PhaseUsage, ...]


def mixture_usage(datasets: Sequence[DatasetSpec], phases: Sequence[MixturePhase], *, seed: int, batch_size: int,
                  seq_len: int, first_step: int, last_step: int, offset: int = 0) -> MixtureUsage:
    """The tokens each dataset gave steps ``[first_step, last_step)`` of a run (replayed from the
    mixture's draws: exact, and cheap: no data is read).

    Args:
        offset: the stream element of step 0's first window (see the module docstring).
    """
    schedule = mixture_schedule(datasets, phases)
    draws = MixtureSchedule([(start * batch_size, weights) for start, weights in schedule], seed=seed)
    spans = []
    total = [0] * len(datasets)
    for start, end, weights in phase_spans(schedule, first_step, last_step):
        windows = draws.counts(start * batch_size + offset, end * batch_size + offset)
        tokens = tuple(int(n) * seq_len for n in windows)
        total = [a + b for a, b in zip(total, tokens, strict=True)]
        spans.append(PhaseUsage(start_step=start, end_step=end, weights=weights, tokens=tokens))
    return MixtureUsage(datasets=tuple(str(d.path) for d in datasets), tokens=tuple(total), phases=tuple(spans))
