"""``marin status``: every step's state, path, age and duration; big graphs summarised by group."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from marin.cli.common import prefix_option, runner_from_options, targets_argument

if TYPE_CHECKING:
    from marin.execution.store.provenance_record import Provenance
    from marin.execution.store.status_record import StatusRecord

# Up to this many steps every row is shown; a bigger graph is summarised by group (--all: rows).
ROWS_SHOWN_UP_TO = 40
_STATES = ("done", "failed", "running", "interrupted", "killed", "missing")


def step_state(output_path: str, *, done: bool | None = None) -> tuple[str, Provenance | StatusRecord | None]:
    """(state, provenance or status record) of one output folder: ``done`` or a
    :class:`~marin.execution.store.status_record.BuildState` value (missing, running, failed, interrupted, killed).

    Args:
        done: whether the step is done, when the caller already knows (from the store's done
            index, :mod:`marin.execution.store.done_index`): spares a lookup per step.
    """
    from marin.execution.store.step_record import StepRecord

    record = StepRecord(output_path)
    if done if done is not None else record.is_done():
        return "done", record.read_provenance()
    status = record.read_status()
    return status.state.value, status.record


def _times(info: Provenance | StatusRecord | None) -> tuple[float | None, float | None]:
    """(when it finished or was last written, how long it took) of a step's record."""
    from marin.execution.store.provenance_record import Provenance

    if isinstance(info, Provenance):
        return info.finished_at, info.duration_s
    return (info.time if info is not None else None), None


def _age(ts: float | None) -> str:
    if not ts:
        return "-"
    seconds = time.time() - ts
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def _states(planned: list[Any], prefix: str, rows: bool) -> list[tuple[str, Provenance | StatusRecord | None]]:
    """The state of each planned step. Done comes from the plan (one listing of the done index);
    the others' status records are read, and with ``rows`` the done steps' provenance too, in
    parallel on object stores."""
    from marin.execution.plan.model import Action
    from rigging import filesystem as fs

    def one(p: Any) -> tuple[str, Provenance | StatusRecord | None]:
        done = p.action is Action.CACHED
        if done and not rows:
            return "done", None
        return step_state(p.output_path, done=done)

    if fs.is_local(prefix) or len(planned) <= 1:
        return [one(p) for p in planned]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=32) as pool:
        return list(pool.map(one, planned))


@click.command("status")
@targets_argument
@prefix_option
@click.option("--all", "show_all", is_flag=True,
              help=f"One row per step even when there are more than {ROWS_SHOWN_UP_TO} (default: a line per group).")
@click.pass_context
def status(ctx: click.Context, targets: tuple[str, ...], prefix: str | None, show_all: bool) -> None:
    """Show the state of every step of TARGET... (by group when there are many)."""
    from marin.cli.accelerator import describe_host_accelerator
    from marin.cli.display import table
    from marin.cli.targets import load_targets
    from marin.execution.core.step import name_group

    steps = load_targets(list(targets))
    runner = runner_from_options(ctx, prefix=prefix)
    the_plan = runner.plan(steps, explain=False)
    found, config = (ctx.obj or {}).get("accelerator"), (ctx.obj or {}).get("config")
    # On a host with none (found or stated), the table stands alone; `marin config` says where it looked.
    accelerator_line = "accelerator: {} ({})".format(*describe_host_accelerator(found, config)) \
        if found is not None or (config is not None and config.accelerator is not None) else None
    rows_wanted = show_all or len(the_plan.steps) <= ROWS_SHOWN_UP_TO
    states = _states(the_plan.steps, runner.store.prefix, rows_wanted)
    if rows_wanted:
        rows = []
        for p, (state, info) in zip(the_plan.steps, states, strict=True):
            finished, duration = _times(info)
            rows.append([p.name, state, p.output_path, _age(finished),
                         f"{duration:.1f}s" if isinstance(duration, int | float) else "-"])
        click.echo(table(rows, ["step", "state", "path", "age", "duration"]))
        if accelerator_line:
            click.echo(accelerator_line)
        return
    groups: dict[str, dict[str, int]] = {}
    for p, (state, _info) in zip(the_plan.steps, states, strict=True):
        counts = groups.setdefault(name_group(p.name) or "(top level)", dict.fromkeys(_STATES, 0))
        counts[state] += 1
    shown = [s for s in _STATES if any(c[s] for c in groups.values())]
    rows = [[group, str(sum(c.values())), *(str(c[s]) for s in shown)] for group, c in groups.items()]
    click.echo(table(rows, ["group", "steps", *shown]))
    click.echo(f"{len(the_plan.steps)} steps in {len(groups)} groups; --all for one row per step")
    if accelerator_line:
        click.echo(accelerator_line)
