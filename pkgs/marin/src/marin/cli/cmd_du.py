"""``marin du``: the bytes of a store's builds, by name prefix and by GC root (from manifests)."""

from __future__ import annotations

import click

from marin.cli.common import gc_roots, prefix_option, reached_outputs, store_of


@click.command("du")
@click.argument("targets", nargs=-1, required=False, metavar="[TARGET...]")
@prefix_option
@click.pass_context
def du(ctx: click.Context, targets: tuple[str, ...], prefix: str | None) -> None:
    """Sum the bytes of the builds of TARGET... (default: every finished build) by name prefix and by root.

    Sizes come from each build's manifest: nothing is listed or read but one record per build.
    """
    from marin.cli.display import table
    from marin.cli.text import format_bytes, plural
    from marin.execution.store.usage import disk_usage

    store = store_of(ctx, prefix)
    roots = gc_roots(store)
    outputs = reached_outputs(ctx, targets, prefix) if targets else None
    usage = disk_usage(store, roots, outputs)
    rows = [[format_bytes(b), str(n), name] for name, (b, n) in sorted(usage.by_prefix.items())]
    click.echo(table(rows, ["bytes", "builds", "name"]))
    click.echo(f"total: {format_bytes(usage.total_bytes)} in {plural(len(usage.sizes), 'build')}")
    if roots:
        click.echo("")
        by_root = [[format_bytes(usage.by_root[r.id][0]), str(usage.by_root[r.id][1]), r.id, r.described()]
                   for r in roots]
        click.echo(table(by_root, ["bytes", "builds", "root", "registered for"]))
    unrooted_bytes, unrooted = usage.unrooted
    click.echo(f"reached by no root: {format_bytes(unrooted_bytes)} in {plural(unrooted, 'build')}"
               + (" (`marin gc --dry-run` lists them)" if unrooted else ""))

