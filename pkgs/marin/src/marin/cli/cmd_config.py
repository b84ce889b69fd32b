"""``marin config``: the resolved configuration and where each value came from."""

from __future__ import annotations

import click

from marin.cli.common import load_config, prefix_option


@click.command("config")
@prefix_option
@click.pass_context
def config(ctx: click.Context, prefix: str | None) -> None:
    """Show the configuration: key, value, source."""
    from marin.cli.display import table

    cfg = load_config(ctx, prefix=prefix)
    rows = [[k, "" if v is None else str(v), src] for k, v, src in cfg.describe()]
    rows.append(["(resolved prefix)", cfg.resolved_prefix(), ""])
    click.echo(table(rows, ["key", "value", "source"]))
