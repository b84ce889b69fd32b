"""Experiment reports: the step graph, states, provenance and training curves as one HTML page.

``collect_plan`` / ``collect_run`` gather a :class:`ReportData` from a plan or a run's result and
the step store; ``render_html`` turns it into a self-contained page; ``write_run_report`` writes
the report of a run under the prefix; ``plot_metrics`` draws a step's training curves as a PNG.
"""

from marin.report.collect import ReportData, ReportStep, StepState, collect_plan, collect_run
from marin.report.outputs import Metrics, TokenizedSummary, read_metrics, read_tokenized
from marin.report.plot import plot_metrics
from marin.report.render import REPORTS_DIR, render_html, write_report, write_run_report

__all__ = [
    "REPORTS_DIR",
    "Metrics",
    "ReportData",
    "ReportStep",
    "StepState",
    "TokenizedSummary",
    "collect_plan",
    "collect_run",
    "plot_metrics",
    "read_metrics",
    "read_tokenized",
    "render_html",
    "write_report",
    "write_run_report",
]
