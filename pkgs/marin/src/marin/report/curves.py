"""Which charts draw a training step's metrics: every series its ``metrics.jsonl`` holds, in groups.

Groups, in the order shown: losses (every loss on one chart), optimiser, throughput, one group per
evaluation task logged during training (``<task>.<metric>``, as
:func:`levanter.eval_harness.scores.flat_metrics` names them), and anything else. A chart holds
series of one unit: the losses together, a task's scores in [0, 1] together, every other series on
a chart of its own. A series logged at one step only (the time to the first step, the wall time)
is not a curve: its group lists it as a value ("logged once").

The report page and ``marin browse`` draw what :func:`metrics_json` returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from marin.experiment.results import Metrics

__all__ = ["Chart", "CurveGroup", "curve_groups", "metrics_json"]

# How known series are labelled (the key itself otherwise).
_LABELS = {
    "loss": "train", "val_loss": "validation", "lr": "learning rate", "grad_norm": "gradient norm",
    "tokens_per_s": "tokens/s", "mfu": "MFU", "step_time": "step time (s)",
    "input_wait_frac": "waiting for input (share of the step)", "time_to_first_step_s": "time to first step (s)",
    "wall_s": "wall time (s)", "blocked_in_checkpoint_s": "blocked in checkpoints (s)",
}
_OPTIMISER = ("lr", "learning_rate", "grad_norm", "update_norm", "param_norm", "weight_decay", "momentum")
_THROUGHPUT = ("tokens_per_s", "examples_per_s", "mfu", "step_time", "input_wait_frac", "time_to_first_step_s",
               "wall_s", "blocked_in_checkpoint_s")


@dataclass(frozen=True)
class Chart:
    """One chart: series of one unit (keys of :attr:`Metrics.series`)."""

    key: str
    title: str
    series: tuple[str, ...]


@dataclass(frozen=True)
class CurveGroup:
    """A heading over charts, and the values logged once that belong under it."""

    key: str
    title: str
    charts: tuple[Chart, ...]
    once: tuple[str, ...] = ()


def _label(key: str, task: str | None = None) -> str:
    if task is not None:
        return key[len(task) + 1:]
    return _LABELS.get(key, key)


def _title(label: str) -> str:
    return label[:1].upper() + label[1:]


def _kind(key: str) -> tuple[str, str | None]:
    """(group kind, task) of a series key."""
    if "." in key:
        return "task", key.rpartition(".")[0]
    if key.endswith("loss") or key.startswith("loss"):
        return "losses", None
    if key in _OPTIMISER or key.startswith(("optim", "opt/")):
        return "optimiser", None
    if key in _THROUGHPUT or key.endswith(("_per_s", "_time", "_s")):
        return "throughput", None
    return "other", None


def _single_charts(keys: list[str], series: dict[str, list[tuple[float, float]]]) -> tuple[list[Chart], list[str]]:
    """A chart per key logged at more than one step; the keys logged once, apart."""
    charts = [Chart(key=k, title=_title(_label(k)), series=(k,)) for k in keys if len(series[k]) > 1]
    return charts, [k for k in keys if len(series[k]) <= 1]


def _task_charts(task: str, keys: list[str], series: dict[str, list[tuple[float, float]]]) -> list[Chart]:
    """A task's scores in [0, 1] on one chart (accuracies and the like); any other on its own."""
    unit = [k for k in keys if all(0.0 <= v <= 1.0 for _, v in series[k])]
    charts = [Chart(key=task, title=task, series=tuple(unit))] if unit else []
    return charts + [Chart(key=k, title=f"{task} {_label(k, task)}", series=(k,)) for k in keys if k not in unit]


def curve_groups(metrics: Metrics) -> list[CurveGroup]:
    """The groups of charts that draw every series of ``metrics`` (see the module docstring)."""
    series = metrics.series
    kinds: dict[str, list[str]] = {}
    tasks: dict[str, list[str]] = {}
    for key in series:
        kind, task = _kind(key)
        if task is not None:
            tasks.setdefault(task, []).append(key)
        else:
            kinds.setdefault(kind, []).append(key)
    groups = []
    losses = kinds.get("losses", [])
    if losses:
        groups.append(CurveGroup(key="losses", title="Losses", charts=(Chart(key="loss", title="Loss", series=tuple(losses)),)))
    for kind, title in (("optimiser", "Optimiser"), ("throughput", "Throughput and timing")):
        charts, once = _single_charts(kinds.get(kind, []), series)
        if charts or once:
            groups.append(CurveGroup(key=kind, title=title, charts=tuple(charts), once=tuple(once)))
    for task in sorted(tasks):
        groups.append(CurveGroup(key=f"task:{task}", title=f"Evaluation: {task}",
                                 charts=tuple(_task_charts(task, tasks[task], series))))
    charts, once = _single_charts(kinds.get("other", []), series)
    if charts or once:
        groups.append(CurveGroup(key="other", title="Other", charts=tuple(charts), once=tuple(once)))
    return groups


def _group_json(group: CurveGroup, task: str | None) -> dict[str, Any]:
    return {
        "key": group.key,
        "title": group.title,
        "charts": [{"key": c.key, "title": c.title, "series": [{"key": k, "label": _label(k, task)} for k in c.series]}
                   for c in group.charts],
        "once": [{"key": k, "label": _label(k)} for k in group.once],
    }


def metrics_json(metrics: Metrics) -> dict[str, Any]:
    """``metrics`` as the page draws it: its series, and the charts they go in (``groups``)."""
    groups = [_group_json(g, g.key[5:] if g.key.startswith("task:") else None) for g in curve_groups(metrics)]
    return {**metrics.to_json(), "groups": groups}
