"""``eval_report(name, [evals...])``: one step putting the results of several evaluations in one table.

Its output holds ``eval_report.json`` (format ``marin.eval_report/v1``: the columns, and a row
per evaluation with its model, checkpoint, values and standard errors) and ``eval_report.md``
(the same as a Markdown table, a task metric as ``value ± stderr``). Columns are named as
``marin compare`` names them: the datasets' (``<dataset>.loss``, ``<dataset>.bpb``), then the
tasks' (``<task>.<metric>``), each in the order the evaluations first give them; a row without a
column shows ``-``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from marin.execution.core.identity import keep_identities
from marin.execution.core.lazy import StepHandle, lower
from marin.experiment.evaluation.eval import writes_eval_results
from marin.experiment.evaluation.results import format_number, markdown_table, read_eval_results
from rigging import filesystem as fs

__all__ = ["EVAL_REPORT_FORMAT", "EVAL_REPORT_JSON", "EVAL_REPORT_MARKDOWN", "EvalReport", "EvalReportConfig",
           "EvalReportRow", "eval_report", "eval_report_step"]

EVAL_REPORT_JSON = "eval_report.json"
EVAL_REPORT_MARKDOWN = "eval_report.md"
EVAL_REPORT_FORMAT = "marin.eval_report/v1"


@dataclass(frozen=True)
class EvalReportRow:
    """One evaluation in the table."""

    label: str
    """The row's name (the eval step's name by default)."""
    model: str
    """The name of the training step it evaluated."""
    results: Any
    """The eval step (a placeholder resolved to its output folder)."""

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label.strip():
            raise ValueError(f"eval report row label must be a non-empty string, got {self.label!r}")


@dataclass(frozen=True)
class EvalReportConfig:
    """The evaluations an eval report puts side by side."""

    rows: tuple[EvalReportRow, ...]
    """One per evaluation, in the table's order."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", tuple(self.rows))
        labels = [r.label for r in self.rows]
        if not labels:
            raise ValueError("an eval report needs at least one evaluation, got none")
        if len(set(labels)) != len(labels):
            raise ValueError(f"eval report row labels must be distinct, got {labels}")


def eval_report_step(config: EvalReportConfig, output_path: str) -> None:
    """Step function: read each evaluation's results; write ``eval_report.json`` and ``eval_report.md``."""
    datasets: list[str] = []
    tasks: list[str] = []
    rows = []
    for row in config.rows:
        results = read_eval_results(str(row.results))
        if results is None:
            raise FileNotFoundError(f"eval report row {row.label!r}: {row.results} holds no eval results")
        datasets += [c for c in results.dataset_metrics() if c not in datasets]
        tasks += [c for c in results.task_metrics() if c not in tasks]
        rows.append({"label": row.label, "model": row.model, "checkpoint": results.checkpoint, "step": results.step,
                     "metrics": results.metrics(), "stderr": results.stderr()})
    columns = datasets + tasks
    document = {"format": EVAL_REPORT_FORMAT, "columns": columns, "rows": rows}
    fs.atomic_write(fs.join(output_path, EVAL_REPORT_JSON), json.dumps(document, indent=2))

    def cell(row: dict[str, Any], column: str) -> str:
        shown = format_number(row["metrics"].get(column))
        stderr = row["stderr"].get(column)
        return shown if stderr is None or shown == "-" else f"{shown} ± {format_number(stderr)}"

    table = markdown_table(["eval", "model", "checkpoint", *columns],
                           [[r["label"], r["model"], str(r["checkpoint"]), *(cell(r, c) for c in columns)] for r in rows])
    fs.atomic_write(fs.join(output_path, EVAL_REPORT_MARKDOWN), table)
    print(table, end="")


class EvalReport(StepHandle, fn=eval_report_step):
    """Handle to an eval report; its output holds ``eval_report.json`` and ``eval_report.md``."""


def eval_report(name: str, evals: Sequence[Any] | Mapping[str, Any], *, version: str = "v1") -> EvalReport:
    """A step tabulating the results of ``evals`` (``evaluate(...)`` handles or their steps).

    Args:
        name: the step's name.
        evals: the evaluations, in the table's order (rows named by their step names), or
            ``{row label: evaluation}``.
        version: as for every step.

    Raises:
        ValueError: no evaluations, something that is not an ``evaluate(...)`` step, or a label twice.
    """
    items = list(evals.items()) if isinstance(evals, Mapping) else [(None, e) for e in evals]
    rows = []
    for label, ev in items:
        step = lower(ev)
        if not writes_eval_results(step):
            raise ValueError(f"eval_report {name!r}: {step.name!r} is not an evaluate(...) step")
        rows.append(EvalReportRow(label=label if label is not None else step.name, model=lower(step.config.model).name,
                                  results=ev))
    return EvalReport(name=name, config=EvalReportConfig(rows=tuple(rows)), version=version)


# Moved from eval_table.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.eval_table")
