"""``marin report``: one self-contained HTML page with the graph, states, provenance and curves."""

from __future__ import annotations

import click

from marin.cli.common import prefix_option, runner_from_options, targets_argument


@click.command("report")
@targets_argument
@prefix_option
@click.option("-o", "--output", "output", default="report.html", show_default=True, metavar="FILE",
              help="Where to write the HTML page (a local file or a store URL).")
@click.option("--title", default=None, help="The page title (default: the targets).")
@click.pass_context
def report(ctx: click.Context, targets: tuple[str, ...], prefix: str | None, output: str, title: str | None) -> None:
    """Write an HTML report of TARGET...: what is cached, what would run and why, and training curves."""
    from marin.cli.targets import load_targets
    from marin.report import collect_plan, write_report

    steps = load_targets(list(targets))
    runner = runner_from_options(ctx, prefix=prefix)
    the_plan = runner.plan(steps, explain=True, note_env=True)
    data = collect_plan(the_plan, title=title or f"marin report: {' '.join(targets)}")
    path = write_report(data, output)
    counts = ", ".join(f"{n} {state}" for state, n in data.summary().items())
    click.echo(f"report: {path} ({len(data.steps)} steps: {counts})")
