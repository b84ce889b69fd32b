"""``marin config``: the resolved configuration and where each value came from."""

from __future__ import annotations

import click

from marin.cli.common import load_config, prefix_option


@click.command("config")
@prefix_option
@click.pass_context
def config(ctx: click.Context, prefix: str | None) -> None:
    """Show the configuration: key, value, source (and the host's accelerator: found or stated)."""
    from marin.cli.accelerator import describe_host_accelerator
    from marin.cli.display import table

    cfg = load_config(ctx, prefix=prefix)
    rows = [[k, "" if v is None else str(v), src] for k, v, src in cfg.describe()]
    rows.append(["(resolved prefix)", cfg.resolved_prefix(), ""])
    rows.append(["(host accelerator)", *describe_host_accelerator((ctx.obj or {}).get("accelerator"), cfg)])
    click.echo(table(rows, ["key", "value", "source"]))
