"""``marin plan``: for every step, cached or the reason it would run."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from marin.cli.common import cache_options, prefix_option, runner_from_options, targets_argument

if TYPE_CHECKING:
    from marin.execution.run.settings import RunSettings


@click.command("plan")
@targets_argument
@prefix_option
@click.option("--force", multiple=True, metavar="GLOB", help="Plan as if these steps were forced.")
@click.option("--only", multiple=True, metavar="GLOB", help="Plan only matching steps (and dependencies).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("-j", "--max-parallel", type=click.IntRange(min=1), default=None,
              help="Steps `marin run` would run at once (for the estimate's wall time).")
@cache_options
@click.pass_context
def plan(ctx: click.Context, targets: tuple[str, ...], prefix: str | None, force: tuple[str, ...],
         only: tuple[str, ...], as_json: bool, max_parallel: int | None, caches: tuple[str, ...],
         strict_env: bool | None) -> None:
    """Say what `marin run` would do for TARGET..., and why."""
    from marin.cli.display import estimate_lines, table
    from marin.cli.targets import load_targets
    from marin.cli.text import format_bytes
    from marin.execution.plan.estimate import format_duration
    from marin.execution.plan.model import Action, ReasonKind

    steps = load_targets(list(targets))
    runner = runner_from_options(ctx, prefix=prefix, force=force, only=only, caches=caches, strict_env=strict_env,
                                 max_parallel=max_parallel)
    the_plan = runner.plan(steps, note_env=True, estimate=True)
    settings = runner.settings
    if as_json:
        click.echo(json.dumps({**the_plan.to_json(), "caches": cache_trust(settings)}, indent=2))
        return
    estimates = the_plan.estimate.steps if the_plan.estimate is not None else {}
    # Where each step runs, when some step to run uses the accelerator.
    on_accelerator = any(e.resource is not None for e in estimates.values())
    rows, warnings = [], []
    for pos, p in enumerate(the_plan.steps):
        # Warnings get lines of their own, under the table, where they are not lost in a long row.
        warnings += [f"warning: {p.name}: {r.detail}" for r in p.reasons if r.kind is ReasonKind.WARNING]
        why = "; ".join([*(str(r) for r in p.reasons if r.kind is not ReasonKind.WARNING), *p.notes()])
        guess = format_duration(estimates[pos].seconds) if pos in estimates else ""
        size = estimates[pos].bytes if pos in estimates else None
        on = [(estimates[pos].resource or "cpu") if pos in estimates else ""] if on_accelerator else []
        rows.append([p.action.value, p.name, p.hash[:16], *on, guess, format_bytes(size) if size is not None else "",
                     why])
    click.echo(table(rows, ["action", "step", "hash", *(["on"] if on_accelerator else []), "estimate", "writes", "why"]))
    n_run = len(the_plan.to_run())
    n_reuse = sum(1 for p in the_plan.steps if p.action is Action.REUSE)
    n_fetch = len(the_plan.to_do()) - n_run - n_reuse
    reused = f", {n_reuse} to reuse (inputs rebuilt with identical output)" if n_reuse else ""
    click.echo(f"{n_run} to run, {n_fetch} to fetch from caches{reused}, "
               f"{len(the_plan.steps) - n_run - n_fetch - n_reuse} cached or unneeded")
    for pos in the_plan.unexpanded():
        click.echo(f"expands after {the_plan.steps[pos].name}: the steps its output decides are planned once it is "
                   "built (estimates leave them out)")
    for line in estimate_lines(the_plan):
        click.echo(line)
    line = accelerator_line(the_plan.estimate)
    if line:
        from marin.execution.run.warm_accelerator import process_line  # light: os and the config's folder

        click.echo(line)
        click.echo(process_line(settings))
    for clash in the_plan.name_clashes:
        # The same line `marin run` refuses with, or warns with for Marin's executor steps.
        click.echo(f"{'warning' if clash.allowed else 'marin run refuses'}: {clash}")
    for line in warnings:
        click.echo(line)
    if settings.caches:
        click.echo(cache_trust_line(settings))


def cache_trust(settings: RunSettings) -> dict[str, Any]:
    """What ``marin plan --json`` says of the caches: which, and whether their entries are checked
    (``verified``: only entries signed by one of ``trusted_keys``, by name, are fetched)."""
    return {"urls": list(settings.caches), "verified": bool(settings.cache_trusted_keys),
            "trusted_keys": [k.name for k in settings.cache_trusted_keys]}


def cache_trust_line(settings: RunSettings) -> str:
    """The line of ``marin plan`` that says whether what the caches hold is checked before it is used."""
    caches = ", ".join(settings.caches)
    if not settings.cache_trusted_keys:
        return (f"caches unverified: entries from {caches} are used without a signature check "
                "(no cache_trusted_keys configured; see docs/caches.md)")
    names = ", ".join(k.name for k in settings.cache_trusted_keys)
    return f"caches verified: an entry from {caches} is used only when signed by one of {names}"


def accelerator_line(estimate: Any) -> str | None:
    """How the steps to run share the host's accelerator (None: none of them uses it)."""
    if estimate is None or estimate.accelerator is None:
        return None
    users = [e for e in estimate.steps.values() if e.resource is not None]
    if not users:
        return None
    host = estimate.accelerator
    how = "one at a time" if host.slots == 1 else f"up to {host.slots} at a time"
    return (f"accelerator: {host.describe()} ({host.source}): {len(users)} step(s) to run use it, {how}; "
            "the others run beside them with it hidden")
