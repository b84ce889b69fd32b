"""Experiment reports: the step graph, states, provenance and training curves as one HTML page.

``collect_plan`` / ``collect_run`` gather a :class:`~marin.report.collect.ReportData` from a plan
or a run's result and the step store; ``render_html`` turns it into a self-contained page;
``write_run_report`` writes the report of a run under the prefix; ``plot_metrics`` draws a step's
training curves as a PNG. Names load on first use (the report after a no-op run must not pay for
the renderer).
"""

from __future__ import annotations

from rigging.lazy import lazy_getattr

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

_WHERE = {
    "ReportData": "marin.report.collect",
    "ReportStep": "marin.report.collect",
    "StepState": "marin.report.collect",
    "collect_plan": "marin.report.collect",
    "collect_run": "marin.report.collect",
    "Metrics": "marin.report.outputs",
    "TokenizedSummary": "marin.report.outputs",
    "read_metrics": "marin.report.outputs",
    "read_tokenized": "marin.report.outputs",
    "plot_metrics": "marin.report.plot",
    "render_html": "marin.report.render",
    "write_report": "marin.report.render",
    "REPORTS_DIR": "marin.report.run_report",
    "write_run_report": "marin.report.run_report",
}


__getattr__ = lazy_getattr(__name__, _WHERE)
