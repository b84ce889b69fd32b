"""``marin status``: a table of every step with its state, path, age and duration."""

from __future__ import annotations

import time

import click

from marin.cli.common import prefix_option, runner_from_options, targets_argument


def step_state(output_path: str) -> tuple[str, dict]:
    """(state, provenance) of one output folder: done, failed, running, killed or missing."""
    from marin.execution.store import BuildState, StepRecord

    record = StepRecord(output_path)
    if record.is_done():
        return "done", record.read_json(record.provenance) or {}
    status = record.read_status()
    if status.state is BuildState.MISSING and not status.fields:
        return "missing", {}
    return status.state.value, status.fields


def _age(ts: float | None) -> str:
    if not ts:
        return "-"
    seconds = time.time() - ts
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


@click.command("status")
@targets_argument
@prefix_option
@click.pass_context
def status(ctx: click.Context, targets: tuple[str, ...], prefix: str | None) -> None:
    """Show the state of every step of TARGET...."""
    from marin.cli.display import table
    from marin.cli.targets import load_targets

    steps = load_targets(list(targets))
    runner = runner_from_options(ctx, prefix=prefix)
    the_plan = runner.plan(steps, explain=False)
    rows = []
    for p in the_plan.steps:
        state, info = step_state(p.output_path)
        finished = info.get("finished_at") or info.get("time")
        duration = info.get("duration_s")
        rows.append([p.name, state, p.output_path, _age(finished), f"{duration:.1f}s" if duration else "-"])
    click.echo(table(rows, ["step", "state", "path", "age", "duration"]))
