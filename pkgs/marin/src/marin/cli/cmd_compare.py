"""``marin compare``: training and evaluation results of the training steps of TARGET..., side by side."""

from __future__ import annotations

import click

from marin.cli.common import prefix_option, runner_from_options, targets_argument
from marin.cli.errors import MarinError

FORMATS = ("table", "csv", "json", "markdown")


@click.command("compare")
@targets_argument
@prefix_option
@click.option("--sort", "sort_by", default=None, metavar="METRIC",
              help="Order rows by this metric, lowest first (e.g. val_loss, <eval set>.bpb).")
@click.option("--descending", is_flag=True, help="Order rows highest first.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="Output format.")
@click.option("--columns", metavar="A,B,...", default=None,
              help="Only these columns (config fields and metrics, comma-separated; globs such as 'story_*' "
                   "work), in this order; the step always comes first.")
@click.pass_context
def compare(ctx: click.Context, targets: tuple[str, ...], prefix: str | None, sort_by: str | None,
            descending: bool, fmt: str, columns: str | None) -> None:
    """Compare the training steps of TARGET...: the config fields in which they differ, and their results.

    The table fits the terminal (COLUMNS): columns that do not fit go to blocks below, each
    repeating the step.
    """
    from marin.cli.targets import load_targets
    from marin.cli.text import fitted_table, terminal_width
    from marin.report.compare import compare_plan

    steps = load_targets(list(targets))
    runner = runner_from_options(ctx, prefix=prefix)
    comparison = compare_plan(runner.plan(steps, explain=False))
    if not comparison.rows:
        raise MarinError(f"no training steps in {' '.join(targets)}", hint="compare experiments that call train_lm(...)")
    if sort_by is not None:
        try:
            comparison = comparison.sorted_by(sort_by, descending=descending)
        except ValueError as e:
            raise MarinError(str(e), hint="pass --sort one of the metrics named above") from None
    if columns is not None:
        try:
            comparison = comparison.select([c.strip() for c in columns.split(",") if c.strip()])
        except ValueError as e:
            raise MarinError(f"--columns: {e}", hint="`marin compare TARGET --format csv` shows every column; globs such as 'story_*' work") from None
    if fmt == "csv":
        click.echo(comparison.to_csv(), nl=False)
    elif fmt == "json":
        import json

        click.echo(json.dumps(comparison.to_json(), indent=2))
    elif fmt == "markdown":
        click.echo(comparison.to_markdown(), nl=False)
    else:
        click.echo(fitted_table(comparison.header(), comparison.cells(), terminal_width()))
