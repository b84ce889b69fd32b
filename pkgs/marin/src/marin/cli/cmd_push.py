"""``marin push``: publish finished steps to a cache, atomically (success record last)."""

from __future__ import annotations

import click

from marin.cli.common import prefix_option, runner_from_options, targets_argument


@click.command("push")
@targets_argument
@click.option("--to", "to", required=True, metavar="URL", help="The cache to publish to (another prefix).")
@prefix_option
@click.pass_context
def push(ctx: click.Context, targets: tuple[str, ...], to: str, prefix: str | None) -> None:
    """Copy every finished step of TARGET... to the cache URL with its provenance and manifest."""
    from marin.cli.targets import load_targets
    from marin.execution.store.cache import push_output
    from marin.execution.store.step_record import StepRecord

    steps = load_targets(list(targets))
    runner = runner_from_options(ctx, prefix=prefix)
    plan = runner.plan(steps, explain=False)
    pushed = present = 0
    unfinished = []
    for p in plan.steps:
        if not StepRecord(p.output_path).is_done():
            unfinished.append(p.name)
            continue
        if push_output(p.output_path, to, p.output_name):  # a CacheMiss reaches the CLI's error funnel
            pushed += 1
            click.echo(f"pushed {p.output_name}")
        else:
            present += 1
    click.echo(f"pushed {pushed}, already in cache {present}, not finished {len(unfinished)}")
    if unfinished:
        click.echo(f"not finished (run them first): {', '.join(unfinished)}", err=True)
