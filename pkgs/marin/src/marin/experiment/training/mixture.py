"""Training mixtures: the weights ``train_lm(datasets=...)`` takes, static or by phase; what ``marin plan``
says of them (each dataset's expected epochs, and a warning when one repeats too often); and the
tokens each dataset gave a finished run, for its ``train_summary.json``.

A static mixture is ``{data: weight}``. A mixture by phase is ``[(0, {a: 0.7, b: 0.3}), (2000, {a:
0.2, b: 0.8})]``: from each step on, that phase's weights (a dataset a phase leaves out has weight
0 there). The first phase's weights are the datasets' own (``DatasetSpec.weight``) and the later
ones are ``DataConfig.phases``, so a static mixture, or one phase alone, keeps the identity it
always had, and a phase changes the identity of the step that trains on it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from levanter.data.spec import DatasetSpec, MixturePhase, mixture_schedule, phase_spans
from levanter.initialize import CheckpointStart
from marin.execution.core.placeholders import Placeholder
from marin.execution.core.step import Step
from marin.execution.core.traits import PlanNote
from rigging import filesystem as fs

__all__ = ["component_name", "mixture_notes", "mixture_summary", "parse_mixture", "reweighted", "source_prefix_problem"]

_HASH_SUFFIX = re.compile(r"-[0-9a-f]{16}$")


def component_name(path: Any) -> str:
    """How a dataset of a mixture is named in messages and sweeps: its step's name (and sub-path),
    or the path it was given."""
    if isinstance(path, Placeholder):
        step, sub = path.target()
        return step.name + (f"/{sub}" if sub else "")
    return str(path)


def _weight(value: Any, *, zero_ok: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0 or value == float("inf"):
        raise ValueError(f"dataset weight must be a number {'>= 0' if zero_ok else '> 0'}, got {value!r}")
    if not zero_ok and not value > 0:
        raise ValueError(f"dataset weight must be a number > 0, got {value!r}")
    return float(value)


def parse_mixture(datasets: Any, *, branch_step: int | None = None
                  ) -> tuple[tuple[DatasetSpec, ...], tuple[MixturePhase, ...]]:
    """The datasets (with the first phase's weights) and the later phases of ``train_lm``'s ``datasets``.

    Args:
        datasets: ``{data: weight}``, or ``[(step, {data: weight}), ...]`` by increasing step, the
            first at step 0 (a branch's at step 0 or at the step it starts from).
        branch_step: the checkpoint step a branch starts from (``initialize_from=checkpoint(m, step=N)``).

    Raises:
        ValueError: one line naming what is wrong.
    """
    if isinstance(datasets, Mapping):
        if not datasets:
            raise ValueError("datasets must be a non-empty mapping of tokenized data to weights")
        return tuple(DatasetSpec(path=d, weight=_weight(w, zero_ok=False)) for d, w in datasets.items()), ()
    if isinstance(datasets, str) or not isinstance(datasets, Sequence) or not datasets:
        raise ValueError(f"datasets must be a mapping of tokenized data to weights or a list of (step, mapping) "
                         f"phases, got {type(datasets).__name__}")
    phases: list[tuple[int, Mapping[Any, Any]]] = []
    for item in datasets:
        ok = isinstance(item, tuple | list) and len(item) == 2 and isinstance(item[0], int) \
            and not isinstance(item[0], bool) and isinstance(item[1], Mapping) and item[1]
        if not ok:
            raise ValueError(f"a phase must be (step, {{data: weight}}), got {item!r}")
        phases.append((item[0], item[1]))
    firsts = (0,) if branch_step is None else (0, branch_step)
    if phases[0][0] not in firsts:
        raise ValueError(f"the first phase must start at step {' or '.join(map(str, firsts))}, got {phases[0][0]}")
    for (a, _), (b, _) in zip(phases, phases[1:], strict=False):
        if b <= a:
            raise ValueError(f"phases must start at increasing steps, got {b} after {a}")
    components: list[Any] = []
    for _, weights in phases:
        components += [d for d in weights if not any(d is c or d == c for c in components)]
    rows = []
    for step, weights in phases:
        row = tuple(_weight(weights.get(c, 0.0), zero_ok=True) for c in components)
        if not sum(row) > 0:
            raise ValueError(f"the phase at step {step} gives every dataset weight 0")
        rows.append(row)
    specs = tuple(DatasetSpec(path=c, weight=w) for c, w in zip(components, rows[0], strict=True))
    return specs, tuple(MixturePhase(start_step=s, weights=row) for (s, _), row in zip(phases[1:], rows[1:],
                                                                                       strict=True))


def source_prefix_problem(specs: Sequence[DatasetSpec], source_specs: Sequence[DatasetSpec]) -> str | None:
    """Why a branch that continues its source's data position cannot (its datasets must start with
    the source's, in their order; new ones come after), or None."""
    mine = [component_name(s.path) for s in specs]
    theirs = [component_name(s.path) for s in source_specs]
    if mine[:len(theirs)] == theirs:
        return None
    return (f"a branch continues its source's data position: list the source's datasets first, in their order "
            f"({', '.join(theirs)}), and new ones after them (or reset_data_loader=True); got {', '.join(mine)}")


def reweighted(specs: Sequence[DatasetSpec], weights: Mapping[str, float]) -> tuple[DatasetSpec, ...]:
    """``specs`` with the weights ``{name: weight}`` (names as :func:`component_name` gives them),
    which must name every dataset of the mixture.

    Raises:
        ValueError: a name is not one of the mixture's, or one of its datasets has no weight.
    """
    names = [component_name(s.path) for s in specs]
    unknown = sorted(set(weights) - set(names))
    missing = [n for n in names if n not in weights]
    if unknown or missing:
        raise ValueError(f"mixture weights must name the datasets {', '.join(names)}"
                         + (f"; unknown: {', '.join(unknown)}" if unknown else "")
                         + (f"; missing: {', '.join(missing)}" if missing else ""))
    return tuple(DatasetSpec(path=s.path, weight=_weight(weights[n], zero_ok=True)) for s, n in zip(specs, names,
                                                                                                     strict=True))


# -- what the plan says ---------------------------------------------------------------------------

def _folder(path: Any, paths: Mapping[int, str]) -> str | None:
    """Where a dataset's data is (its step's output folder, when the plan placed it)."""
    if isinstance(path, Placeholder):
        step, sub = path.target()
        base = paths.get(id(step))
        return fs.join(base, sub) if base and sub else base
    return str(path)


def _epoch_windows(folder: str, seq_len: int) -> float | None:
    """Windows of ``seq_len + 1`` tokens in one pass over a tokenized dataset's train split (None: no
    readable index). Packed text is cut from documents and their separators; chat takes a record a window."""
    # The chat format's name only (numpy, no Grain); the index is read as JSON, not through
    # zephyr.shards, whose package takes a second to import: planning stays quick.
    from levanter.data.chat import CHAT_FORMAT

    try:
        index = json.loads(fs.read_text(fs.join(folder, "index.json")))
        train = index["splits"]["train"]
        records = int(train["records"])
        tokens = int(train["tokens"])
        chat = index["format"] == CHAT_FORMAT
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if chat:
        return float(records)
    return (tokens + records) / (seq_len + 1)


def mixture_notes(step: Step, paths: Mapping[int, str]) -> list[PlanNote]:
    """The plan's lines for a training step: each dataset's expected epochs over the run, a warning
    for each one read more than ``epochs_warning`` times, and one for data that is missing."""
    config = step.config
    data, trainer = config.data, config.trainer
    start = trainer.initialize_from
    first = start.step if isinstance(start, CheckpointStart) else 0
    spans = phase_spans(mixture_schedule(data.datasets, data.phases), first, trainer.num_train_steps)
    notes, parts = [], []
    for i, spec in enumerate(data.datasets):
        name = component_name(spec.path)
        windows = sum((end - lo) * trainer.batch_size * w[i] for lo, end, w in spans)
        folder = _folder(spec.path, paths)
        per_epoch = _epoch_windows(folder, trainer.seq_len) if folder else None
        if per_epoch is None:
            if isinstance(spec.path, Placeholder):
                parts.append(f"{name} ? epochs (not built yet)")
                continue
            parts.append(f"{name} ? epochs (no data)")
            notes.append(PlanNote(f"{name}: tokenized data missing or incomplete (no readable index.json): "
                                  "training will refuse it", warning=True))
            continue
        epochs = windows / per_epoch if per_epoch else float("inf")
        parts.append(f"{name} {epochs:.2f} epochs")
        if epochs > data.epochs_warning:
            notes.append(PlanNote(f"{name} would be read {epochs:.1f} times (over {data.epochs_warning:g} epochs): "
                                  "give it less weight or more data, or set train_lm(..., epochs_warning=...)",
                                  warning=True))
    phased = f" in {len(spans)} phases (from steps {', '.join(str(s[0]) for s in spans)})" if data.phases else ""
    notes.insert(0, PlanNote(f"mixture over steps {first}-{trainer.num_train_steps}{phased}: {', '.join(parts)}"))
    late = [p.start_step for p in data.phases if p.start_step >= trainer.num_train_steps]
    if late:
        notes.append(PlanNote(f"phases at steps {', '.join(map(str, late))} start after the run's last step "
                              f"({trainer.num_train_steps}): they take effect only in a longer run"))
    return notes


# -- what a run records -----------------------------------------------------------------------------

def _labels(paths: Sequence[str], prefix: str | None) -> list[str]:
    """Readable names of resolved dataset folders: relative to the store, without the hash, where unique."""
    rel = [p[len(prefix.rstrip("/")) + 1:] if prefix and p.startswith(prefix.rstrip("/") + "/") else p
           for p in paths]
    short = [_HASH_SUFFIX.sub("", p) for p in rel]
    return short if len(set(short)) == len(short) else rel


def mixture_summary(config: Any, *, steps: int, first_step: int, data_offset: int,
                    prefix: str | None) -> dict[str, Any]:
    """``tokens_by_dataset`` and ``tokens_by_phase`` of a run that trained steps ``[first_step, steps)``
    (replayed from its mixture's draws; ``data_offset`` as levanter's summary gives it)."""
    # Grain comes with the draws; this runs in the training step's process, which has it loaded.
    from levanter.data.usage import mixture_usage

    data, trainer = config.data, config.trainer
    usage = mixture_usage(data.datasets, data.phases, seed=trainer.seed, batch_size=trainer.batch_size,
                          seq_len=trainer.seq_len, first_step=first_step, last_step=steps, offset=data_offset)
    labels = _labels(list(usage.datasets), prefix)
    return {
        "tokens_by_dataset": dict(zip(labels, usage.tokens, strict=True)),
        "tokens_by_phase": [{"start_step": p.start_step, "end_step": p.end_step,
                             "weights": dict(zip(labels, p.weights, strict=True)),
                             "tokens_by_dataset": dict(zip(labels, p.tokens, strict=True))} for p in usage.phases],
    }
