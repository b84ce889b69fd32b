"""The results of an evaluation, one format for every reader: ``eval_results.json``.

Format :data:`EVAL_FORMAT` (``marin.eval/v2``) holds, for one checkpoint of one model, the loss,
perplexity and bits per byte of each labelled dataset (``results``, as ``marin.eval/v1`` did) and
the scores of each benchmark task (``tasks``: metric -> value, standard errors apart, with the
folder of the task's eval step that holds lm-eval's ``results.json`` and samples). Files of
``marin.eval/v1`` (datasets only) are still read. ``marin compare``, the report and
``eval_report`` read them through :func:`read_eval_results` and name their columns with
:meth:`EvalResults.metrics`: ``<dataset>.loss``, ``<dataset>.bpb``, ``<task>.<metric>``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from levanter.eval_harness.scores import TaskScores, metric_name
from marin.execution.core.identity import keep_identities
from rigging import filesystem as fs

__all__ = ["EVAL_FORMAT", "EVAL_FORMAT_V1", "EVAL_RESULTS_FILE", "EvalResults", "checkpoint_suffix",
           "dataset_metric_names", "format_number", "markdown_table", "read_eval_results", "score_lines", "score_rows",
           "write_eval_results"]

EVAL_RESULTS_FILE = "eval_results.json"
EVAL_FORMAT = "marin.eval/v2"
EVAL_FORMAT_V1 = "marin.eval/v1"
_READABLE = (EVAL_FORMAT_V1, EVAL_FORMAT)

# A dataset's columns: short name -> key of its scores.
_DATASET_COLUMNS = (("loss", "loss"), ("bpb", "bits_per_byte"))


def checkpoint_suffix(checkpoint: Any) -> str:
    """What a column name gets for the checkpoint it scores: ``""`` for the final parameters,
    ``"@<step>"`` for another checkpoint."""
    return "" if checkpoint in (None, "final") else f"@{checkpoint}"


def dataset_metric_names(label: str, suffix: str = "") -> list[str]:
    """The columns of a labelled dataset's scores: ``<label><suffix>.loss`` and ``.bpb``."""
    return [f"{label}{suffix}.{short}" for short, _ in _DATASET_COLUMNS]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True)
class EvalResults:
    """What one eval step found for one checkpoint of one model."""

    model: str | None = None
    """The training step's output folder."""
    checkpoint: int | str | None = None
    """``"final"`` or the step number of the checkpoint."""
    step: int | None = None
    """The training step the parameters are from (the run's length for ``"final"``)."""
    seq_len: int | None = None
    """Context of the scored windows of the datasets (None without datasets)."""
    datasets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Label -> ``{kind, loss, perplexity, bits_per_byte, tokens, bytes}``."""
    tasks: Mapping[str, TaskScores] = field(default_factory=dict)
    """Task -> its scores."""
    task_outputs: Mapping[str, str] = field(default_factory=dict)
    """Task -> the output folder of its eval step (lm-eval's ``results.json`` and samples)."""

    @property
    def suffix(self) -> str:
        """Its columns' checkpoint suffix (:func:`checkpoint_suffix`)."""
        return checkpoint_suffix(self.checkpoint)

    def dataset_metrics(self, suffix: str = "") -> dict[str, float | None]:
        """``<label><suffix>.loss`` and ``.bpb`` of every dataset (``suffix``: e.g. ``"@200"`` for a checkpoint)."""
        return {name: _number(scores.get(key)) for label, scores in self.datasets.items()
                for name, (_short, key) in zip(dataset_metric_names(label, suffix), _DATASET_COLUMNS, strict=True)}

    def task_metrics(self, suffix: str = "") -> dict[str, float | None]:
        """``<task><suffix>.<metric>`` of every task's every metric."""
        return {metric_name(f"{task}{suffix}", metric): value
                for task, scores in self.tasks.items() for metric, value in scores.metrics.items()}

    def metrics(self, suffix: str = "") -> dict[str, float | None]:
        """Every result by column name: the datasets', then the tasks'."""
        return {**self.dataset_metrics(suffix), **self.task_metrics(suffix)}

    def stderr(self, suffix: str = "") -> dict[str, float]:
        """The standard errors of the task metrics of :meth:`metrics`, by the same names."""
        return {metric_name(f"{task}{suffix}", metric): value
                for task, scores in self.tasks.items() for metric, value in scores.stderr.items()}

    def higher_is_better(self, suffix: str = "") -> dict[str, bool]:
        """Whether more is better, by the names of :meth:`task_metrics`, where the task says."""
        return {metric_name(f"{task}{suffix}", metric): better
                for task, scores in self.tasks.items() for metric, better in scores.higher_is_better.items()
                if metric in scores.metrics}

    def to_json(self) -> dict[str, Any]:
        return {"format": EVAL_FORMAT, "model": self.model, "checkpoint": self.checkpoint, "step": self.step,
                "seq_len": self.seq_len, "results": {k: dict(v) for k, v in self.datasets.items()},
                "tasks": {k: v.to_json() for k, v in self.tasks.items()}, "task_outputs": dict(self.task_outputs)}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> EvalResults:
        """Results as :meth:`to_json` writes them, or as ``marin.eval/v1`` did.

        Raises:
            ValueError: the document is of neither format.
        """
        if document.get("format") not in _READABLE:
            raise ValueError(f"not eval results: format {document.get('format')!r}, expected one of {_READABLE}")
        step, seq_len, checkpoint = document.get("step"), document.get("seq_len"), document.get("checkpoint")
        datasets = {str(k): v for k, v in (document.get("results") or {}).items() if isinstance(v, Mapping)}
        tasks = {str(k): TaskScores.from_json(v) for k, v in (document.get("tasks") or {}).items()
                 if isinstance(v, Mapping)}
        outputs = {str(k): v for k, v in (document.get("task_outputs") or {}).items() if isinstance(v, str)}
        model = document.get("model")
        return cls(model=model if isinstance(model, str) else None,
                   checkpoint=checkpoint if isinstance(checkpoint, int | str) else None,
                   step=step if isinstance(step, int) else None, seq_len=seq_len if isinstance(seq_len, int) else None,
                   datasets=datasets, tasks=tasks, task_outputs=outputs)


def read_eval_results(output_path: str) -> EvalResults | None:
    """The results an eval step wrote into ``output_path``; None when it holds none (yet) or they
    are of another format (a step still running, a half-written file, another kind of step)."""
    try:
        document = json.loads(fs.read_text(fs.join(output_path, EVAL_RESULTS_FILE)))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(document, dict):
        return None
    try:
        return EvalResults.from_json(document)
    except ValueError:
        return None


def write_eval_results(output_path: str, results: EvalResults) -> None:
    """Write ``results`` as ``<output_path>/eval_results.json`` (atomically)."""
    fs.atomic_write(fs.join(output_path, EVAL_RESULTS_FILE), json.dumps(results.to_json(), indent=2))


def format_number(value: float | None) -> str:
    """A table cell: ``-`` for nothing, an integer as such, else four significant digits."""
    if value is None:
        return "-"
    if float(value).is_integer() and abs(value) < 1e9:  # counts; FLOPs read better as 1.2e+12
        return str(int(value))
    return f"{value:.4g}"


def score_rows(results: EvalResults) -> list[tuple[str, str, str]]:
    """``(kind, name, scores)`` for each task (``"task"``, ``story_qa``, ``acc 0.22 ± 0.02937, acc_norm
    0.215 ± 0.02912``) and each dataset (``"data"``, ``held-out``, ``loss 1.234, bpb 0.5678``)."""
    rows = []
    for task, found in results.tasks.items():
        shown = ", ".join(f"{m} {format_number(v)}" + (f" ± {format_number(found.stderr[m])}" if m in found.stderr else "")
                          for m, v in found.metrics.items())
        rows.append(("task", task + results.suffix, shown))
    for label, scores in results.datasets.items():
        rows.append(("data", label + results.suffix,
                     ", ".join(f"{short} {format_number(_number(scores.get(key)))}" for short, key in _DATASET_COLUMNS)))
    return rows


def score_lines(results: EvalResults) -> list[str]:
    """The scores in lines for a terminal: ``task story_qa      acc 0.22 ± 0.02937, ...`` (:func:`score_rows`)."""
    return [f"{kind} {name:13s} {shown}" for kind, name, shown in score_rows(results)]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table (``|`` inside a cell escaped), ending with a newline."""
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), "|" + "|".join("---" for _ in header) + "|", *map(line, rows)]) + "\n"


# Moved from eval_results.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.eval_results")
