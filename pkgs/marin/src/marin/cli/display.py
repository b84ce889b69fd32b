"""Progress display: a live per-step view on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TextIO

import click

from marin.execution.outcome import Outcome, RunResult, StepOutcome
from marin.execution.plan import Plan, PlannedStep

__all__ = ["LiveReporter", "PlainReporter", "make_reporter", "summary_table"]

_COLORS = {
    Outcome.CACHED: "blue",
    Outcome.RAN: "green",
    Outcome.FAILED: "red",
    Outcome.UPSTREAM_FAILED: "yellow",
    Outcome.WOULD_RUN: "cyan",
    Outcome.INTERRUPTED: "red",
    Outcome.UNNEEDED: "white",
}


class PlainReporter:
    """One line per event: for logs, pipes and CI."""

    def __init__(self, out: TextIO | None = None):
        self.out = out or sys.stdout

    def _line(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def planned(self, plan: Plan) -> None:
        counts = {}
        for p in plan.steps:
            counts[p.action.value] = counts.get(p.action.value, 0) + 1
        shown = ", ".join(f"{n} {action}" for action, n in counts.items())
        self._line(f"plan: {len(plan.steps)} steps: {shown}")
        for p in plan.to_do():
            self._line(f"  will {p.action.value} {p.output_name}: {'; '.join(str(r) for r in p.reasons) or 'run'}")

    def started(self, planned: PlannedStep) -> None:
        self._line(f"[start] {planned.output_name}")

    def waiting(self, planned: PlannedStep, holder: str) -> None:
        self._line(f"[wait]  {planned.output_name} (another runner holds it: {holder})")

    def finished(self, outcome: StepOutcome) -> None:
        took = f" in {outcome.duration:.1f}s" if outcome.duration is not None else ""
        extra = f": {outcome.error.splitlines()[0]}" if outcome.error else ""
        note = f" ({outcome.note})" if outcome.note else ""
        self._line(f"[{outcome.outcome.value}] {outcome.name}{took}{note}{extra}")

    def tick(self, running: Sequence[PlannedStep]) -> None:
        pass


class LiveReporter(PlainReporter):
    """On a terminal: finished steps scroll, running steps stay at the bottom with a timer."""

    def __init__(self, out: TextIO | None = None):
        super().__init__(out)
        self._drawn = 0
        self._started: dict[str, float] = {}
        self._last = 0.0

    def _clear(self) -> None:
        if self._drawn:
            self.out.write("\x1b[1A\x1b[2K" * self._drawn)
            self._drawn = 0

    def _line(self, text: str) -> None:
        self._clear()
        super()._line(text)

    def started(self, planned: PlannedStep) -> None:
        self._started[planned.output_name] = time.time()
        super().started(planned)

    def finished(self, outcome: StepOutcome) -> None:
        self._clear()
        color = _COLORS.get(outcome.outcome, "white")
        took = f" in {outcome.duration:.1f}s" if outcome.duration is not None else ""
        extra = f": {outcome.error.splitlines()[0]}" if outcome.error else ""
        self.out.write(click.style(f"{outcome.outcome.value:>8}", fg=color) + f" {outcome.name}{took}{extra}\n")
        self.out.flush()

    def tick(self, running: Sequence[PlannedStep]) -> None:
        now = time.time()
        if now - self._last < 0.25:
            return
        self._last = now
        self._clear()
        spin = "|/-\\"[int(now * 4) % 4]
        for p in running:
            elapsed = now - self._started.get(p.output_name, now)
            self.out.write(f"  {spin} running {p.output_name}  {elapsed:6.1f}s\n")
        self._drawn = len(running)
        self.out.flush()


def make_reporter(out: TextIO | None = None) -> PlainReporter:
    stream = out or sys.stdout
    return LiveReporter(stream) if stream.isatty() else PlainReporter(stream)


def _fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    return f"{seconds / 60:.1f}m"


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    for r in rows:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines)


def summary_table(result: RunResult, max_cached_rows: int = 20) -> str:
    """The end-of-run table; with many cached steps, those collapse into one count line."""
    interesting = [s for s in result.steps if s.outcome not in (Outcome.CACHED, Outcome.UNNEEDED)]
    quiet = [s for s in result.steps if s.outcome in (Outcome.CACHED, Outcome.UNNEEDED)]
    shown = result.steps if len(quiet) <= max_cached_rows else interesting
    rows = [[s.outcome.value, s.name, s.hash[:16], _fmt_duration(s.duration)] for s in shown]
    counts = ", ".join(f"{result.count(o)} {o.value}" for o in Outcome if result.count(o))
    text = table(rows, ["outcome", "step", "hash", "time"]) if rows else ""
    if len(shown) < len(result.steps):
        text += f"{chr(10) if text else ''}({len(result.steps) - len(shown)} cached or unneeded steps not listed)"
    return f"{text}\n{counts}" if text else counts
