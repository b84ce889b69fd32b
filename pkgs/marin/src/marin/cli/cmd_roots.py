"""``marin roots``: the GC roots of a store (what ``marin gc`` keeps), and ``marin roots rm``."""

from __future__ import annotations

import click

from marin.cli.common import gc_roots, prefix_option, store_of
from marin.cli.errors import MarinError


@click.group("roots", invoke_without_command=True)
@prefix_option
@click.pass_context
def roots(ctx: click.Context, prefix: str | None) -> None:
    """List the GC roots: every `marin run` registers its targets as one; `marin gc` keeps what they reach."""
    if ctx.invoked_subcommand is not None:
        ctx.obj = {**(ctx.obj or {}), "roots_prefix": prefix}
        return
    from marin.cli.display import table
    from marin.cli.text import format_bytes, format_local_time, plural
    from marin.execution.store.usage import disk_usage

    store = store_of(ctx, prefix)
    found = gc_roots(store)
    if not found:
        click.echo(f"no GC roots under {store.prefix} (`marin run` registers one for its targets)")
        return
    usage = disk_usage(store, found, outputs=())
    rows = []
    for root in found:
        kept, present = usage.by_root[root.id]
        rows.append([root.id, format_bytes(kept), f"{present}/{len(root.outputs)}", " ".join(root.targets),
                     f"{root.user or '?'}@{root.host or '?'}", format_local_time(root.updated_at)])
    click.echo(table(rows, ["root", "keeps", "outputs", "targets", "by", "updated"]))
    click.echo(f"{plural(len(found), 'root')} under {store.prefix}; `marin roots rm ID` drops one, `marin du` sums "
               "by name")


@roots.command("rm")
@click.argument("ids", nargs=-1, required=True, metavar="ID...")
@prefix_option
@click.pass_context
def rm(ctx: click.Context, ids: tuple[str, ...], prefix: str | None) -> None:
    """Drop the roots ID... (their outputs go at the next `marin gc` unless another root reaches them)."""
    from marin.execution.store.roots import UnknownRoot, remove_roots

    store = store_of(ctx, prefix or (ctx.obj or {}).get("roots_prefix"))
    try:
        removed = remove_roots(store.prefix, ids)
    except (UnknownRoot, ValueError) as e:
        raise MarinError(str(e), hint="`marin roots` lists the roots and their ids") from None
    for root_id in removed:
        click.echo(f"removed root {root_id}")
