"""Progress display: live bars on a terminal (``rich``), periodic plain lines otherwise.

Both show, for every running step, the progress record it writes beside its output
(``rigging.progress``: training step k of N with loss and tokens/s, tokenize shards done of
total), wherever the step runs (a local process or a Ray worker: the record is read from the
step's output folder), and how long the whole run has left: the plan's estimate
(``marin.execution.plan.estimate``) with the running steps' own ETAs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from marin.cli.text import format_bytes
from marin.execution.core.step import output_name_of
from marin.execution.plan.estimate import format_duration, schedule
from marin.execution.plan.model import Action, Plan, PlannedStep
from marin.execution.run.outcome import Outcome, RunResult, StepOutcome
from marin.execution.store.step_record import StepRecord
from rigging.progress import ProgressRecord, read_progress

__all__ = ["LiveReporter", "PlainReporter", "describe_progress", "estimate_lines", "make_reporter", "summary_table"]

_COLORS = {
    Outcome.CACHED: "blue",
    Outcome.RAN: "green",
    Outcome.REUSED: "magenta",
    Outcome.FAILED: "red",
    Outcome.UPSTREAM_FAILED: "yellow",
    Outcome.WOULD_RUN: "cyan",
    Outcome.INTERRUPTED: "red",
    Outcome.UNNEEDED: "white",
}

PLAIN_PROGRESS_INTERVAL_S = 10.0
"""Seconds between two rounds of progress lines in plain output (CI logs stay readable)."""


def describe_progress(record: ProgressRecord) -> str:
    """``"step 120/400 (30%), loss 2.310, 46.0k tokens/s, eta 41.0s"``."""
    parts = [f"{record.unit} {record.done}/{record.total} ({record.fraction:.0%})"]
    if "loss" in record.metrics:
        parts.append(f"loss {record.metrics['loss']:.3f}")
    if "tokens_per_s" in record.metrics:
        rate = record.metrics["tokens_per_s"]
        parts.append(f"{rate / 1000:.1f}k tokens/s" if rate >= 1000 else f"{rate:.0f} tokens/s")
    if record.eta_s is not None and record.done < record.total:
        parts.append(f"eta {format_duration(record.eta_s)}")
    return ", ".join(parts)


class _RunWatch:
    """What the display knows about the run: the plan, its estimate, running and finished steps."""

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self.plan: Plan | None = None
        self.pos_of: dict[str, int] = {}
        self.started: dict[str, float] = {}
        self.finished: set[str] = set()
        self.records: dict[str, ProgressRecord] = {}
        self.files_folder: dict[str, str] = {}
        """Where each running step writes (its folder, or the attempt folder its status names)."""

    def begin(self, p: PlannedStep) -> None:
        """``p`` started (its status record, naming where it writes, is written)."""
        self.started[p.output_name] = self.clock()
        self.files_folder.pop(p.output_name, None)

    def planned(self, plan: Plan) -> None:
        self.plan = plan
        self.pos_of = {p.output_name: pos for pos, p in enumerate(plan.steps)}

    def read(self, p: PlannedStep) -> ProgressRecord | None:
        """The step's progress record of this attempt (an earlier attempt's is not shown)."""
        at = self.files_folder.get(p.output_name)
        if at is None:
            at = self.files_folder[p.output_name] = StepRecord(p.output_path).files_folder(current=True)
        record = read_progress(at)
        if record is not None and record.updated_at >= self.started.get(p.output_name, 0.0) - 1.0:
            self.records[p.output_name] = record
        return self.records.get(p.output_name)

    def estimate_of(self, p: PlannedStep) -> float | None:
        estimate = self.plan.estimate if self.plan is not None else None
        pos = self.pos_of.get(p.output_name)
        if estimate is None or pos not in estimate.steps:
            return None
        return estimate.steps[pos].seconds

    def remaining(self, running: Sequence[PlannedStep]) -> float | None:
        """Seconds the run has left: running steps by their ETA (or estimate less elapsed time),
        then the steps still to start by their estimates, scheduled as the runner would."""
        plan = self.plan
        if plan is None or plan.estimate is None or not plan.estimate.steps:
            return None
        now = self.clock()
        left: dict[int, float] = {}
        for p in running:
            pos = self.pos_of.get(p.output_name)
            if pos is None:
                continue
            record = self.records.get(p.output_name)
            est = self.estimate_of(p)
            if record is not None and record.eta_s is not None:
                left[pos] = max(0.0, record.eta_s - (now - record.updated_at))
            elif est is not None:
                left[pos] = max(0.0, est - (now - self.started.get(p.output_name, now)))
            else:
                return None  # a running step with neither an ETA nor an estimate: unknown
        waiting: dict[int, float] = {}
        for pos, e in plan.estimate.steps.items():
            if plan.steps[pos].output_name in self.finished or pos in left or plan.steps[pos].action is not Action.RUN:
                continue
            if e.seconds is None:
                return None  # a step still to run was never built: no honest total
            waiting[pos] = e.seconds
        deps = {pos: plan.steps[pos].deps for pos in (*waiting, *left)}
        # Accelerator steps queue for it here as in the plan's estimate.
        return schedule(waiting, deps, plan.estimate.max_parallel, running=left, resources=plan.estimate.resources,
                        accelerator=plan.estimate.accelerator)


def estimate_lines(plan: Plan) -> list[str]:
    """The plan's estimate in a few lines (nothing when nothing is to run)."""
    estimate = plan.estimate
    if estimate is None or not estimate.steps:
        return []
    lines = []
    if len(estimate.unknown) < len(estimate.steps):
        path = " → ".join(estimate.names[pos] for pos in estimate.critical_path)
        floor = "at least " if estimate.unknown else ""
        lines.append(f"estimate: {floor}{format_duration(estimate.wall_s)} with -j {estimate.max_parallel} "
                     f"(steps add up to {format_duration(estimate.total_s)}; critical path {path}: "
                     f"{format_duration(estimate.critical_path_s)})")
    if estimate.accelerator_hours:
        lines.append("  accelerator-hours: " + ", ".join(f"{kind} {hours:.2f} h"
                                                         for kind, hours in sorted(estimate.accelerator_hours.items())))
    sized = [e for e in estimate.steps.values() if e.bytes is not None]
    if sized:
        part = "" if len(sized) == len(estimate.steps) else f" ({len(sized)} of {len(estimate.steps)} steps known)"
        lines.append(f"  writes about {format_bytes(estimate.total_bytes)}{part}, as earlier builds of the same names did")
    if estimate.unknown:
        names = ", ".join(estimate.names[pos] for pos in estimate.unknown)
        lines.append(f"  no estimate (never built before): {names}")
    return lines


class PlainReporter:
    """One line per event, and every ``progress_interval`` seconds a line per running step: for
    logs, pipes and CI.

    Args:
        out: where lines go (stdout).
        progress_interval: seconds between two rounds of progress lines.
        clock: the time source (tests).
    """

    def __init__(self, out: TextIO | None = None, *, progress_interval: float = PLAIN_PROGRESS_INTERVAL_S,
                 clock: Callable[[], float] = time.time):
        if progress_interval <= 0:
            raise ValueError(f"progress_interval must be > 0, got {progress_interval}")
        self.out = out or sys.stdout
        self.progress_interval = progress_interval
        self.watch = _RunWatch(clock)
        self._last_round = clock()

    def _line(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def planned(self, plan: Plan) -> None:
        self.watch.planned(plan)
        counts: dict[str, int] = {}
        for p in plan.steps:
            counts[p.action.value] = counts.get(p.action.value, 0) + 1
        shown = ", ".join(f"{n} {action}" for action, n in counts.items())
        self._line(f"plan: {len(plan.steps)} steps: {shown}")
        for p in plan.to_do():
            self._line(f"  will {p.action.value} {p.output_name}: {'; '.join(str(r) for r in p.reasons) or 'run'}")
        for line in estimate_lines(plan):
            self._line(line)

    def started(self, planned: PlannedStep) -> None:
        self.watch.begin(planned)
        self._line(f"[start] {planned.output_name}")

    def waiting(self, planned: PlannedStep, holder: str) -> None:
        self._line(f"[wait]  {planned.output_name} (another runner holds it: {holder})")

    def accelerator_wait(self, planned: PlannedStep, line: str) -> None:
        self._line(f"[wait]  {planned.output_name} waits for the accelerator: {line}")

    def finished(self, outcome: StepOutcome) -> None:
        self.watch.finished.add(output_name_of(outcome.name, outcome.hash))
        took = f" in {outcome.duration:.1f}s" if outcome.duration is not None else ""
        extra = f": {outcome.error.splitlines()[0]}" if outcome.error else ""
        note = f" ({outcome.note})" if outcome.note else ""
        self._line(f"[{outcome.outcome.value}] {outcome.name}{took}{note}{extra}")

    def expanded(self, planned: PlannedStep, plan: Plan, added: Sequence[PlannedStep]) -> None:
        self.watch.planned(plan)
        to_run = sum(1 for p in added if p.action is not Action.CACHED and p.action is not Action.UNNEEDED)
        self._line(f"[expand] {planned.name}: {len(added)} more steps ({to_run} to build)")

    def tick(self, running: Sequence[PlannedStep]) -> None:
        now = self.watch.clock()
        if now - self._last_round < self.progress_interval or not running:
            return
        self._last_round = now
        for p in running:
            record = self.watch.read(p)
            elapsed = now - self.watch.started.get(p.output_name, now)
            if record is not None:
                self._line(f"[progress] {p.name}: {describe_progress(record)} ({elapsed:.0f}s in)")
            else:
                self._line(f"[running] {p.name}: {elapsed:.0f}s in")
        left = self.watch.remaining(running)
        if left is not None:
            self._line(f"[progress] run: about {format_duration(left)} left")

    def close(self) -> None:
        """End the display (nothing to end for plain lines)."""


class LiveReporter(PlainReporter):
    """On a terminal: finished steps scroll; every running step has a progress bar with its count,
    loss and ETA (``rich``), and one more bar shows the run's remaining estimate."""

    _REFRESH_S = 0.25
    _READ_S = 1.0

    def __init__(self, out: TextIO | None = None, *, clock: Callable[[], float] = time.time):
        super().__init__(out, clock=clock)
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn

        self.console = Console(file=self.out, highlight=False)
        self.bars = Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                             TextColumn("{task.fields[detail]}", markup=False),
                             console=self.console, transient=True, auto_refresh=False)
        self._tasks: dict[str, Any] = {}
        self._run_task: Any = None
        self._live = False
        self._last_draw = 0.0
        self._last_read = 0.0

    def _line(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)

    def _start(self) -> None:
        if not self._live:
            self.bars.start()
            self._live = True

    def started(self, planned: PlannedStep) -> None:
        self.watch.begin(planned)
        self._start()
        self._tasks[planned.output_name] = self.bars.add_task(planned.name, total=None, detail="starting")
        if self._run_task is None and self.watch.plan is not None and self.watch.plan.estimate is not None:
            self._run_task = self.bars.add_task("whole run", total=None, detail="")

    def finished(self, outcome: StepOutcome) -> None:
        key = output_name_of(outcome.name, outcome.hash)
        self.watch.finished.add(key)
        if key in self._tasks:
            self.bars.remove_task(self._tasks.pop(key))
        took = f" in {outcome.duration:.1f}s" if outcome.duration is not None else ""
        extra = f": {outcome.error.splitlines()[0]}" if outcome.error else ""
        note = f" ({outcome.note})" if outcome.note else ""
        color = _COLORS.get(outcome.outcome, "white")
        from rich.text import Text

        self.console.print(Text.assemble((f"{outcome.outcome.value:>8}", color), f" {outcome.name}{took}{note}{extra}"))
        if not self._tasks:
            self.close()

    def tick(self, running: Sequence[PlannedStep]) -> None:
        now = self.watch.clock()
        if now - self._last_draw < self._REFRESH_S or not self._live:
            return
        self._last_draw = now
        read = now - self._last_read >= self._READ_S
        if read:
            self._last_read = now
        for p in running:
            task = self._tasks.get(p.output_name)
            if task is None:
                continue
            record = self.watch.read(p) if read else self.watch.records.get(p.output_name)
            elapsed = now - self.watch.started.get(p.output_name, now)
            if record is not None:
                self.bars.update(task, total=record.total, completed=record.done,
                                 detail=f"{describe_progress(record)}  {elapsed:.0f}s")
            else:
                est = self.watch.estimate_of(p)
                guess = f" of about {format_duration(est)}" if est is not None else ""
                self.bars.update(task, detail=f"{elapsed:.1f}s{guess}")
        if self._run_task is not None:
            left = self.watch.remaining(running)
            if left is not None:
                self.bars.update(self._run_task, detail=f"about {format_duration(left)} left")
        self.bars.refresh()

    def close(self) -> None:
        if self._live:
            self.bars.stop()
            self._live = False
            for task in list(self.bars.task_ids):
                self.bars.remove_task(task)
            self._tasks.clear()
            self._run_task = None


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
    """The end-of-run table; with many cached steps, those collapse into one count line.

    When the run had an estimate, each step built shows it beside the actual time.
    """
    interesting = [s for s in result.steps if s.outcome not in (Outcome.CACHED, Outcome.UNNEEDED)]
    quiet = [s for s in result.steps if s.outcome in (Outcome.CACHED, Outcome.UNNEEDED)]
    shown = result.steps if len(quiet) <= max_cached_rows else interesting
    estimate = result.plan.estimate if result.plan is not None else None
    if estimate is not None and estimate.steps:
        by_key = {(result.plan.steps[pos].name, result.plan.steps[pos].hash): e for pos, e in estimate.steps.items()}

        def guess(s: StepOutcome) -> str:
            e = by_key.get((s.name, s.hash))
            return "-" if e is None else ("none" if e.seconds is None else _fmt_duration(e.seconds))

        rows = [[s.outcome.value, s.name, s.hash[:16], guess(s), _fmt_duration(s.duration)] for s in shown]
        header = ["outcome", "step", "hash", "estimate", "time"]
    else:
        rows = [[s.outcome.value, s.name, s.hash[:16], _fmt_duration(s.duration)] for s in shown]
        header = ["outcome", "step", "hash", "time"]
    counts = ", ".join(f"{result.count(o)} {o.value}" for o in Outcome if result.count(o))
    text = table(rows, header) if rows else ""
    if len(shown) < len(result.steps):
        text += f"{chr(10) if text else ''}({len(result.steps) - len(shown)} cached or unneeded steps not listed)"
    return f"{text}\n{counts}" if text else counts
