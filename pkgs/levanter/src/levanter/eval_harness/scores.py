"""A task's scores as the harness's results give them, by metric name (no JAX, no lm_eval imported here).

lm-eval keys a task's results ``"<metric>,<filter>"`` (``"acc,none"``, ``"acc_stderr,none"``,
``"exact_match,strict-match"``) beside an ``"alias"``. :func:`task_scores` reads them into one
:class:`TaskScores` per task: the metric under its own name where the filter is ``none`` (every
log-likelihood task's), under lm-eval's key otherwise, its standard error apart, and the
document count, shots and task version the results record for it. :func:`metric_name` is how
every table names a task's metric: ``<task>.<metric>`` (``story_qa.acc``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RESULTS_FILE", "TaskScores", "flat_metrics", "metric_name", "samples_file", "task_scores"]

RESULTS_FILE = "results.json"
"""The harness's results, as :func:`levanter.eval_harness.run.run_tasks` writes them into its output folder."""

_NO_FILTER = "none"
_STDERR = "_stderr"


def samples_file(task: str) -> str:
    """The name of task ``task``'s samples file in the output folder (one JSON line per document)."""
    return f"samples_{task}.jsonl"


def metric_name(task: str, metric: str) -> str:
    """How tables and logs name ``metric`` of ``task``: ``<task>.<metric>``."""
    return f"{task}.{metric}"


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


@dataclass(frozen=True)
class TaskScores:
    """One task's scores."""

    metrics: dict[str, float]
    """Metric -> value, in the harness's order (``acc``, ``acc_norm``, ``perplexity`` ...)."""
    stderr: dict[str, float] = field(default_factory=dict)
    """Metric -> its standard error, where the harness gives a number."""
    higher_is_better: dict[str, bool] = field(default_factory=dict)
    """Metric -> whether a higher value is better, as the task declares."""
    samples: int | None = None
    """Documents scored (after ``limit``)."""
    num_fewshot: int | None = None
    """Few-shot examples per prompt."""
    version: Any = None
    """The task's version (its YAML's ``metadata.version``)."""

    def to_json(self) -> dict[str, Any]:
        return {"metrics": self.metrics, "stderr": self.stderr, "higher_is_better": self.higher_is_better,
                "samples": self.samples, "num_fewshot": self.num_fewshot, "version": self.version}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskScores:
        """The scores :meth:`to_json` wrote (non-numbers are left out)."""
        def numbers(key: str) -> dict[str, float]:
            values = data.get(key) or {}
            return {str(k): v for k, v in ((k, _finite(v)) for k, v in values.items()) if v is not None}

        better = {str(k): bool(v) for k, v in (data.get("higher_is_better") or {}).items() if isinstance(v, bool)}
        samples, shots = data.get("samples"), data.get("num_fewshot")
        return cls(metrics=numbers("metrics"), stderr=numbers("stderr"), higher_is_better=better,
                   samples=samples if isinstance(samples, int) else None,
                   num_fewshot=shots if isinstance(shots, int) else None, version=data.get("version"))


def _metric(key: str) -> tuple[str, bool] | None:
    """``(metric name, is a standard error)`` of a results key, None for keys that are no metric."""
    name, comma, flt = key.partition(",")
    if not comma:
        return None  # "alias", "name", "sample_len" ...
    stderr = name.endswith(_STDERR)
    base = name[: -len(_STDERR)] if stderr else name
    return (base if flt == _NO_FILTER else f"{base},{flt}"), stderr


def task_scores(results: Mapping[str, Any]) -> dict[str, TaskScores]:
    """Every task's (and group's) :class:`TaskScores` in the harness's results (``results.json``).

    Raises:
        ValueError: ``results`` has no ``results`` mapping (not the harness's results).
    """
    per_task = results.get("results")
    if not isinstance(per_task, Mapping):
        raise ValueError("not lm-eval results: no 'results' mapping of task to metrics")
    groups = results.get("groups") if isinstance(results.get("groups"), Mapping) else {}
    out: dict[str, TaskScores] = {}
    for task, values in [*per_task.items(), *((g, v) for g, v in groups.items() if g not in per_task)]:
        if not isinstance(values, Mapping):
            continue
        metrics: dict[str, float] = {}
        stderr: dict[str, float] = {}
        for key, raw in values.items():
            parsed = _metric(str(key))
            value = _finite(raw)
            if parsed is None or value is None:
                continue
            name, is_stderr = parsed
            (stderr if is_stderr else metrics)[name] = value
        better = (results.get("higher_is_better") or {}).get(task) or {}
        counts = (results.get("n-samples") or {}).get(task) or {}
        shots = (results.get("n-shot") or {}).get(task)
        out[str(task)] = TaskScores(
            metrics=metrics, stderr={k: v for k, v in stderr.items() if k in metrics},
            higher_is_better={str(k): v for k, v in better.items() if isinstance(v, bool)},
            samples=counts.get("effective") if isinstance(counts.get("effective"), int) else None,
            num_fewshot=shots if isinstance(shots, int) and not isinstance(shots, bool) else None,
            version=(results.get("versions") or {}).get(task))
    return out


def flat_metrics(scores: Mapping[str, TaskScores]) -> dict[str, float]:
    """``{"<task>.<metric>": value}`` of every task's metrics (what a tracker logs)."""
    return {metric_name(task, m): v for task, s in scores.items() for m, v in s.metrics.items()}
