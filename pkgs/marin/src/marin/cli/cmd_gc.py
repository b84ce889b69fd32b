"""``marin gc``: remove outputs under the prefix that the given experiments do not reach."""

from __future__ import annotations

import click

from marin.cli.common import prefix_option, runner_from_options, targets_argument


@click.command("gc")
@targets_argument
@prefix_option
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.pass_context
def gc(ctx: click.Context, targets: tuple[str, ...], prefix: str | None, dry_run: bool) -> None:
    """Remove step outputs that no step of TARGET... reaches (never one held by a live lease)."""
    from marin.cli.targets import load_targets
    from marin.execution.store.gc import collect_garbage

    steps = load_targets(list(targets))
    runner = runner_from_options(ctx, prefix=prefix)
    plan = runner.plan(steps, explain=False)
    keep = {p.output_name for p in plan.steps}
    report = collect_garbage(runner.store, keep, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for folder in report.removed:
        click.echo(f"{verb} {folder}")
    for folder in report.kept_live:
        click.echo(f"kept {folder} (held by a live lease)")
    click.echo(f"{verb} {len(report.removed)} outputs, {report.freed_bytes / 1e6:.1f} MB freed"
               f"{' (dry run)' if dry_run else ''}; kept {len(keep)} reachable")
