"""The report written after every ``marin run`` (kept light: a no-op run must stay cheap)."""

from __future__ import annotations

import hashlib
import os
import time

from marin.execution.run.outcome import Outcome, RunResult
from marin.execution.store.store import StepStore
from rigging import filesystem as fs

__all__ = ["write_run_report"]

REPORTS_DIR = "reports"


def write_run_report(result: RunResult, store: StepStore) -> str:
    """Write the report of ``result`` into the store and return its path.

    The report goes to ``<prefix>/reports/run-<time>.html``, and a copy to
    ``<prefix>/reports/latest.html`` so the newest is always at one place. A run that built
    nothing reports the same graph in the same states as the last such run: its page is kept
    under a name made from those states and reused, so a no-op run stays cheap.
    """
    noop_name = None
    if all(s.outcome in (Outcome.CACHED, Outcome.UNNEEDED) for s in result.steps):
        states = "\n".join(f"{s.hash} {s.outcome.value}" for s in result.steps)
        noop_name = f"noop-{hashlib.sha256(states.encode()).hexdigest()[:16]}.html"
        noop_path = store.path(REPORTS_DIR, noop_name)
        if fs.file_exists(noop_path):
            return noop_path
    from marin.report.collect import collect_run
    from marin.report.render import render_html

    report = collect_run(result)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(report.generated_at))
    name = noop_name or f"run-{stamp}-{os.getpid()}.html"
    page = render_html(report)
    path = store.path(REPORTS_DIR, name)
    fs.atomic_write(path, page)
    fs.atomic_write(store.path(REPORTS_DIR, "latest.html"), page)
    return path
