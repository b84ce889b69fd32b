"""Compare training runs: one row per training step, the config fields in which they differ as
columns, beside their training and evaluation results (``marin compare`` and the HTML report).

Evaluation results are read through ``marin.experiment.evaluation.results`` and named as it names
them: ``<dataset>.loss``, ``<dataset>.bpb`` and ``<task>.<metric>`` (``story_qa.acc``), with
``@<step>`` after the dataset or task for a checkpoint other than the final one.
"""

from __future__ import annotations

import csv
import dataclasses
import fnmatch
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from marin.execution.core.encoding import flatten_config
from marin.execution.core.graph import dependencies_of
from marin.execution.plan.config_diff import differing_fields, field_value
from marin.execution.plan.model import Plan
from marin.execution.store.step_record import StepRecord
from marin.experiment.evaluation.results import format_number as _fmt
from marin.experiment.evaluation.results import markdown_table, read_eval_results
from marin.experiment.results import FLOPS_METRICS, TRAIN_METRICS, read_metrics, train_metrics
from rigging.names import did_you_mean

__all__ = ["Comparison", "CompareRow", "compare_plan"]


@dataclass
class CompareRow:
    """One training step: what sets it apart and how it did."""

    name: str
    hash: str
    output_path: str
    fields: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float | None] = field(default_factory=dict)
    series: Any = field(default=None, repr=False, compare=False)
    """The run's ``metrics.jsonl`` as read for the table (``marin.experiment.results.Metrics``), for curves."""
    stderr: dict[str, float] = field(default_factory=dict)
    """Standard errors of task metrics, by the metric's column name."""
    files_folder: str = ""
    """Where the run's files are: its output folder, or the attempt folder its records name."""

    @property
    def label(self) -> str:
        return f"{self.name}-{self.hash[:8]}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "hash": self.hash, "label": self.label, "output_path": self.output_path,
                "fields": self.fields, "metrics": self.metrics, "stderr": self.stderr}


@dataclass
class Comparison:
    """Rows of training steps; ``fields`` are the differing config fields, ``metrics`` the results."""

    rows: list[CompareRow]
    fields: list[str]
    metrics: list[str]
    eval_sets: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    """Benchmark tasks with scores (``@<step>`` for another checkpoint than the final one)."""
    task_metrics: list[str] = field(default_factory=list)
    """The columns of :attr:`metrics` that are task scores (``<task>.<metric>``)."""
    higher_is_better: dict[str, bool] = field(default_factory=dict)
    """Task score column -> whether more is better, as its task declares."""

    def sorted_by(self, metric: str, *, descending: bool = False) -> Comparison:
        """The rows ordered by ``metric`` (rows without it last); raises ValueError for an unknown metric."""
        if metric not in self.metrics:
            raise ValueError(f"no metric {metric!r} to sort by; metrics: {', '.join(self.metrics) or 'none'}")

        def key(row: CompareRow) -> tuple[bool, float]:
            value = row.metrics.get(metric)
            if value is None:
                return True, 0.0
            return False, -value if descending else value

        return dataclasses.replace(self, rows=sorted(self.rows, key=key))

    def select(self, columns: Sequence[str]) -> Comparison:
        """Only ``columns`` (config fields and metrics, by name or glob: ``story_*``), in that order;
        the step column always comes first. Raises ValueError naming a column that matches none."""
        known = [*self.fields, *self.metrics]
        chosen: list[str] = []
        for pattern in columns:
            found = [c for c in known if fnmatch.fnmatchcase(c, pattern)] if pattern != "step" else []
            if not found and pattern != "step":
                raise ValueError(f"no column {pattern!r}" + (did_you_mean(pattern, known)
                                                             or f"; columns: {', '.join(known) or 'none'}"))
            chosen += [c for c in found if c not in chosen]
        rows = [dataclasses.replace(r, fields={k: v for k, v in r.fields.items() if k in chosen},
                                    metrics={k: v for k, v in r.metrics.items() if k in chosen},
                                    stderr={k: v for k, v in r.stderr.items() if k in chosen}) for r in self.rows]
        return dataclasses.replace(self, rows=rows, fields=[f for f in chosen if f in self.fields],
                                   metrics=[m for m in chosen if m in self.metrics])

    def header(self) -> list[str]:
        return ["step", *self.fields, *self.metrics]

    def cells(self) -> list[list[str]]:
        """Every row as display strings, in :meth:`header` order."""
        return [[row.label, *(row.fields.get(f, "") for f in self.fields),
                 *(_fmt(row.metrics.get(m)) for m in self.metrics)] for row in self.rows]

    def to_json(self) -> dict[str, Any]:
        return {"fields": self.fields, "metrics": self.metrics, "eval_sets": self.eval_sets, "tasks": self.tasks,
                "task_metrics": self.task_metrics, "higher_is_better": self.higher_is_better, "rows": [r.to_json() for r in self.rows]}

    def to_csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(self.header())
        for row in self.rows:
            writer.writerow([row.label, *(row.fields.get(f, "") for f in self.fields),
                             *("" if row.metrics.get(m) is None else repr(row.metrics[m]) for m in self.metrics)])
        return out.getvalue()

    def to_markdown(self) -> str:
        return markdown_table(self.header(), self.cells())


def compare_plan(plan: Plan) -> Comparison:
    """The comparison of every step in ``plan`` that makes a model (training, preference training, a merge
    of checkpoints), with the eval steps that read them."""
    from levanter.dpo.config import DpoRunConfig
    from marin.experiment.posttrain.merge import MergeCheckpointsConfig
    from marin.experiment.training.train import TrainLmConfig

    hashes = plan.hashes()
    training = [p for p in plan.steps if isinstance(p.step.config, TrainLmConfig | DpoRunConfig | MergeCheckpointsConfig)]
    row_of = {p.hash: i for i, p in enumerate(training)}
    flat = [flatten_config(p.step.config, hashes) for p in training]
    differing = differing_fields(flat)
    names = {p.hash: p.name for p in plan.steps}
    rows = []
    for p, f in zip(training, flat, strict=True):
        row = CompareRow(name=p.name, hash=p.hash, output_path=p.output_path,
                         fields={k: field_value(k, f, names) for k in differing},
                         files_folder=StepRecord(p.output_path).files_folder(current=True))
        row.series = read_metrics(row.files_folder)
        row.metrics.update(train_metrics(row.files_folder, row.series))
        rows.append(row)
    evals = _eval_columns(plan, rows, row_of, hashes)
    return Comparison(rows=rows, fields=differing,
                      metrics=[*TRAIN_METRICS, *FLOPS_METRICS, *evals.dataset_metrics, *evals.task_metrics],
                      eval_sets=evals.eval_sets, tasks=evals.tasks, task_metrics=evals.task_metrics,
                      higher_is_better=evals.higher_is_better)


@dataclass
class _EvalColumns:
    eval_sets: list[str] = field(default_factory=list)
    dataset_metrics: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    task_metrics: list[str] = field(default_factory=list)
    higher_is_better: dict[str, bool] = field(default_factory=dict)


def _extend(names: list[str], more: Any) -> None:
    names += [n for n in more if n not in names]


def _eval_columns(plan: Plan, rows: list[CompareRow], row_of: dict[str, int], hashes: dict[int, str]) -> _EvalColumns:
    """Put the results of the plan's eval steps into the rows of the models they evaluated; the columns they fill."""
    from marin.experiment.evaluation.eval import writes_eval_results

    columns = _EvalColumns()
    for p in plan.steps:
        if not writes_eval_results(p.step):
            continue
        models = [row_of[hashes[id(d)]] for d in dependencies_of(p.step) if hashes[id(d)] in row_of]
        results = read_eval_results(StepRecord(p.output_path).files_folder(current=True))
        if not models or results is None:
            continue
        suffix = results.suffix
        row = rows[models[0]]
        _extend(columns.eval_sets, [f"{label}{suffix}" for label in results.datasets])
        _extend(columns.tasks, [f"{task}{suffix}" for task in results.tasks])
        _extend(columns.dataset_metrics, results.dataset_metrics(suffix))
        _extend(columns.task_metrics, results.task_metrics(suffix))
        row.metrics.update(results.metrics(suffix))
        row.stderr.update(results.stderr(suffix))
        columns.higher_is_better.update(results.higher_is_better(suffix))
    return columns
