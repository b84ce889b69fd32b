"""What training and eval steps leave behind, read back as named metrics: the one place a metric's
name is decided.

``marin compare``, the report, a sweep's objective and a scaling-law fit all name a run's results
the same way:

* ``loss``, ``val_loss``, ``steps_trained``: the training step's last logged values;
* ``params``, ``model_flops``, ``mfu``: its FLOPs accounting (``train_summary.json``);
* ``<eval set>.loss``, ``<eval set>.bpb``, ``<task>.<metric>``: an eval step's scores of the run's
  final parameters (``<eval set>@<step>.loss`` for another checkpoint), named by
  :mod:`marin.experiment.evaluation.results`, which owns their format.

Every reader tolerates a missing or half-written file (a step may still be running, or may not
be a training step at all) and returns ``None`` rather than raising.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from marin.experiment.evaluation.results import dataset_metric_names, read_eval_results
from rigging import filesystem as fs

__all__ = [
    "FLOPS_METRICS",
    "KNOWN_SERIES",
    "METRICS_FILE",
    "TRAIN_METRICS",
    "TRAIN_SUMMARY_FILE",
    "Metrics",
    "metric_names",
    "parse_metrics",
    "read_json_object",
    "read_metrics",
    "read_text_if_any",
    "read_train_summary",
    "run_metrics",
    "train_metrics",
]

METRICS_FILE = "metrics.jsonl"
"""A training step's logged series, one JSON object per line, each with a ``step``."""
TRAIN_SUMMARY_FILE = "train_summary.json"
"""What a training step reports beside its model: losses, steps, FLOPs, the step it started from."""

# The series a training step may log, in the order they are shown; others are kept after these.
KNOWN_SERIES = ("loss", "val_loss", "lr", "tokens_per_s", "grad_norm", "mfu")

TRAIN_METRICS = ("loss", "val_loss", "steps_trained")
"""Training results every compared run gets, in this order."""
FLOPS_METRICS = ("params", "model_flops", "mfu")
"""The FLOPs accounting shown beside them: parameters, model FLOPs trained, model FLOPs utilisation."""
_FLOPS_KEYS = {"params": "num_params", "model_flops": "model_flops", "mfu": "mfu"}  # train_summary.json's names


@dataclass
class Metrics:
    """The numeric series of one ``metrics.jsonl``: ``{key: [(step, value), ...]}``.

    Attributes:
        series: each numeric key's finite values by step, in file order.
        rows: how many JSON rows with a ``step`` were read.
        skipped: lines that were not such rows (blank, malformed, or a half-written last line).
    """

    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    rows: int = 0
    skipped: int = 0

    def last(self, key: str) -> tuple[float, float] | None:
        """The last ``(step, value)`` of ``key``, or None when it was never logged."""
        points = self.series.get(key)
        return points[-1] if points else None

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "skipped": self.skipped,
            "series": {key: [[x, y] for x, y in points] for key, points in self.series.items()},
        }


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def parse_metrics(text: str) -> Metrics:
    """Parse the text of a ``metrics.jsonl`` (one JSON object per line, each with a ``step``)."""
    metrics = Metrics()
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            metrics.skipped += 1
            continue
        step = _number(row.get("step")) if isinstance(row, dict) else None
        if step is None:
            metrics.skipped += 1
            continue
        metrics.rows += 1
        for key, raw in row.items():
            if key == "step":
                continue
            value = _number(raw)
            if value is not None:
                metrics.series.setdefault(key, []).append((step, value))
    order = {key: i for i, key in enumerate(KNOWN_SERIES)}
    metrics.series = dict(sorted(metrics.series.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))
    return metrics


def read_text_if_any(path: str) -> str | None:
    """The text of ``path``, or None when it is missing, a folder or not UTF-8."""
    try:
        return fs.read_text(path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, UnicodeDecodeError):
        return None


def read_metrics(output_path: str) -> Metrics | None:
    """The metrics of the step at ``output_path`` (or of a ``metrics.jsonl`` path itself).

    Returns None when there is no metrics file or it holds no row with a ``step``.
    """
    path = output_path if output_path.endswith(".jsonl") else fs.join(output_path, METRICS_FILE)
    text = read_text_if_any(path)
    if text is None:
        return None
    metrics = parse_metrics(text)
    return metrics if metrics.rows else None


def read_json_object(path: str) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when there is none (missing, malformed, not an object)."""
    text = read_text_if_any(path)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def read_train_summary(output_path: str) -> dict[str, Any] | None:
    """The ``train_summary.json`` a training step wrote, or None."""
    return read_json_object(fs.join(output_path, TRAIN_SUMMARY_FILE))


def train_metrics(output_path: str, metrics: Metrics | None = None) -> dict[str, float | None]:
    """The training metrics (:data:`TRAIN_METRICS`, :data:`FLOPS_METRICS`) of the training step at
    ``output_path``; ``metrics``: its ``metrics.jsonl`` when already read. None where not recorded."""
    if metrics is None:
        metrics = read_metrics(output_path)
    summary = read_train_summary(output_path) or {}
    out: dict[str, float | None] = {}
    for key, summary_key in (("loss", "final_loss"), ("val_loss", "val_loss")):
        last = metrics.last(key) if metrics is not None else None
        out[key] = last[1] if last else _number(summary.get(summary_key))
    steps, start = _number(summary.get("steps")), _number(summary.get("start_step")) or 0.0
    out["steps_trained"] = steps - start if steps is not None else None
    for key in FLOPS_METRICS:
        out[key] = _number(summary.get(_FLOPS_KEYS[key]))
    return out


def run_metrics(train_output: str, eval_outputs: Iterable[str] = ()) -> dict[str, float | None]:
    """Every metric of one run: its training step's and those of the eval steps that scored it."""
    out = train_metrics(train_output)
    for path in eval_outputs:
        results = read_eval_results(path)
        if results is not None:
            out.update(results.metrics(results.suffix))
    return out


def metric_names(eval_labels: Iterable[str] = ()) -> list[str]:
    """The metric names a run with eval sets ``eval_labels`` (final parameters) can have."""
    return [*TRAIN_METRICS, *FLOPS_METRICS, *(name for label in eval_labels for name in dataset_metric_names(label))]
