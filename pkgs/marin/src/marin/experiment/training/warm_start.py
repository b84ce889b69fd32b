"""Where a training build starts: step 0, a checkpoint it branches from, or an earlier build it extends.

A *branch* (``train_lm(..., initialize_from=checkpoint(model, step=N))``) names its start in its
config, so the source's identity and ``N`` are part of its own.

An *extension* is found, not named: when an earlier build of the same step differs only in
``num_train_steps``, in the learning-rate schedule's shape (where a WSD decay starts) or in its
mixture's later phases, and the two schedules and mixtures agree on the first K steps, the new
build starts from that build's newest checkpoint at or before K. Both runs see the same batches in the same order with the same
learning rates up to there, so the result is the same, bit for bit, as training from step 0:
warm-starting never changes an output's identity, it only builds the same thing faster.

The plan (``marin plan``) asks :func:`find_extension` once, of the records it read; the run hands
its answer (a :class:`~marin.execution.core.traits.Start`) to the training step, which acts on
it (:func:`extension_start`) and never reads the store to decide again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from levanter.data.spec import MixturePhase, mixture_schedule
from marin.execution.core.identity import keep_identities
from marin.execution.core.traits import Start
from marin.execution.store.layout import short_output_path
from marin.execution.store.provenance_record import Provenance
from rigging import filesystem as fs

__all__ = ["Extension", "NoExtension", "extension_start", "find_extension"]

# Config fields an extension may change: how long, the mixture's later phases, and the shape of
# the learning-rate schedule (``AdamConfig.SCHEDULE_FIELDS``); the rates and the mixtures' weights
# are then compared step by step.
EXTENDABLE_FIELDS = ("trainer.num_train_steps", "data.phases")
SCHEDULE_PREFIX = "optimizer."


@dataclass(frozen=True)
class Extension:
    """Start from checkpoint ``step`` of the earlier build at ``source`` (its output folder)."""

    source: str
    step: int

    def describe(self) -> str:
        return f"extends {short_output_path(self.source)} from step {self.step} (saves {self.step} steps)"

    def planned(self) -> Start:
        """The plan's decision, as the run hands it to the training step."""
        return Start(self.describe(), extends=self.source, step=self.step)


@dataclass(frozen=True)
class NoExtension:
    """Why no earlier build can be extended (None of these when there is no candidate at all)."""

    reason: str

    def describe(self) -> str:
        return self.reason

    def planned(self) -> Start:
        """The plan's note: the build starts from step 0."""
        return Start(self.reason)


def _is_schedule_field(key: str, optimizer: Any) -> bool:
    """True for ``optimizer.<field>`` keys naming a field that only shapes the learning-rate schedule."""
    return key.startswith(SCHEDULE_PREFIX) and key[len(SCHEDULE_PREFIX):] in type(optimizer).SCHEDULE_FIELDS


def find_extension(*, name: str, version: str, fn: str, config: Any, flat: Mapping[str, str],
                   earlier: Sequence[tuple[str, Provenance, Mapping[str, str]]],
                   optimizer_from_json: Any) -> Extension | NoExtension | None:
    """The best earlier build to extend, why none can be, or None when none is a candidate.

    ``name``, ``version`` and ``fn`` are the new build's step name, version and function identity.

    Args:
        config: its training config (levanter's ``TrainLmConfig``).
        flat: its hashed fields, flattened (``{"dotted.key": canonical text}``), in the same form
            as the third item of each ``earlier`` entry.
        earlier: successful earlier builds of the same name, newest first:
            ``(output folder, provenance record, flattened hashed fields)``.
        optimizer_from_json: rebuilds an optimizer config from its JSON form in a provenance record.
    """
    from levanter.checkpoint import checkpoint_dir, committed_steps

    best: Extension | None = None
    why: list[str] = []
    new_steps = config.trainer.num_train_steps
    for path, provenance, old_flat in earlier:
        if provenance.name != name or provenance.fn != fn or provenance.version != version:
            continue
        differing = [k for k in set(flat) | set(old_flat) if flat.get(k) != old_flat.get(k)]
        if not differing or any(k not in EXTENDABLE_FIELDS and not _is_schedule_field(k, config.optimizer)
                                for k in differing):
            continue  # the same build, or another recipe: not a candidate
        old_config = provenance.config if isinstance(provenance.config, dict) else {}
        old_steps = (old_config.get("trainer") or {}).get("num_train_steps")
        if not isinstance(old_steps, int):
            continue
        old_optimizer = optimizer_from_json(old_config.get("optimizer") or {})
        parting = config.optimizer.first_step_apart(new_steps, old_optimizer, old_steps)
        mixing = _mixtures_part(config.data, old_config) if "data.phases" in differing else new_steps
        limit = min(parting, mixing, new_steps - 1)
        kept = [s for s in committed_steps(checkpoint_dir(path)) if s <= limit]
        if not kept:
            where = f"no checkpoint at or before step {limit}"
            if mixing < min(old_steps, new_steps) and mixing <= parting:
                why.append(f"cannot extend {short_output_path(path)}: the mixtures' phases part at step {mixing} "
                           f"(it keeps {where})")
            elif parting < min(old_steps, new_steps):
                why.append(f"cannot extend {short_output_path(path)}: {_schedule_cause(config.optimizer)} "
                           f"(the learning rates part at step {parting}; it keeps {where})")
            else:
                why.append(f"cannot extend {short_output_path(path)}: it keeps {where}")
            continue
        if best is None or kept[-1] > best.step:
            best = Extension(source=path, step=kept[-1])
    if best is not None:
        return best
    return NoExtension("; ".join(why)) if why else None


def _mixtures_part(data: Any, old_config: Mapping[str, Any]) -> int:
    """The first step at which the mixture of ``data`` draws with other weights than the earlier
    build's (whose config, as its provenance holds it, has the same datasets and other phases)."""
    old_phases = ((old_config.get("data") or {}).get("phases")) or []
    old = mixture_schedule(data.datasets, [MixturePhase(p["start_step"], tuple(p["weights"])) for p in old_phases])
    new = mixture_schedule(data.datasets, data.phases)

    def weights_at(schedule: list[tuple[int, tuple[float, ...]]], step: int) -> tuple[float, ...]:
        return [w for start, w in schedule if start <= step][-1]

    for step in sorted({start for start, _ in old} | {start for start, _ in new}):
        if weights_at(old, step) != weights_at(new, step):
            return step
    return 1 << 62  # the same weights at every step


def _schedule_cause(optimizer: Any) -> str:
    schedule = getattr(optimizer.schedule, "value", optimizer.schedule)
    if schedule in ("cosine", "linear"):
        return f"{schedule} decay depends on num_train_steps"
    return f"the {schedule} schedules differ"


def extension_start(start: Start) -> Any:
    """Where levanter starts a run the plan decided extends an earlier build (``start.extends``):
    that build's checkpoint ``start.step``, its data position and its curve.

    Raises:
        ValueError: ``start`` extends no earlier build.
    """
    from levanter.checkpoint import checkpoint_dir
    from levanter.initialize import CheckpointStart

    if start.extends is None or start.step is None:
        raise ValueError(f"not an extension of an earlier build: {start!r}")
    return CheckpointStart(checkpoint_path=checkpoint_dir(start.extends), step=start.step,
                           metrics_path=fs.join(start.extends, "metrics.jsonl"))


# Moved from warm_start.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.warm_start")
