"""``marin gc``: remove the outputs no GC root reaches, and what killed processes left."""

from __future__ import annotations

import sys
from typing import Any

import click

from marin.cli.common import gc_roots, prefix_option, reached_outputs, store_of
from marin.cli.errors import MarinError


@click.command("gc")
@click.argument("targets", nargs=-1, required=False, metavar="[FILE...]")
@prefix_option
@click.option("--dry-run", is_flag=True, help="List what would be removed, with sizes; remove nothing.")
@click.option("--yes", is_flag=True, help="Remove models (outputs holding a checkpoint) too, without asking.")
@click.pass_context
def gc(ctx: click.Context, targets: tuple[str, ...], prefix: str | None, dry_run: bool, yes: bool) -> None:
    """Remove outputs that no GC root reaches (`marin roots`), never one held by a live lease.

    FILE... (experiments) are kept too, for this collection: their steps are added to the roots.
    Outputs past their step's ttl go even when a root reaches them. Removing a model needs --yes,
    or a yes at a terminal; without either nothing at all is removed.
    """
    from marin.cli.text import plural
    from marin.execution.store.gc import find_garbage

    store = store_of(ctx, prefix)
    roots = gc_roots(store)
    keep = {o for r in roots for o in r.outputs}
    if targets:
        keep |= reached_outputs(ctx, targets, prefix)
    elif not roots:
        raise MarinError(f"no GC roots under {store.prefix} and no experiment files given: nothing says what to keep, "
                         "so nothing was removed",
                         hint="name the experiments to keep (`marin gc FILE...`), or run them once (`marin run` "
                              "registers them as roots)")
    report = find_garbage(store, keep, machine=True)
    # What goes is said once per output: before removal when the user is shown or asked (and then
    # only what stayed after), else after it, each output with what became of it.
    asking = dry_run or bool(report.models and not yes)
    if asking:
        _say(report, "would remove", spared={})
    for folder in report.kept_live:
        click.echo(f"kept {folder} (held by a live lease)")
    for problem in report.problems:
        click.echo(f"error: {problem}", err=True)
    if report.models and not dry_run and not yes and not _confirmed(report.models):
        names = ", ".join(e.folder for e in report.models)
        raise MarinError(f"gc would remove {plural(len(report.models), 'model')} ({names}); nothing was removed",
                         hint="run again with --yes to remove them too, or at a terminal to be asked")
    if not dry_run:
        _remove(store, report, keep)
        spared = dict(report.spared)
        if asking:
            for folder, why in report.spared:
                click.echo(f"kept {folder} ({why})")
        else:
            _say(report, "removing", spared)
    verb = "would remove" if dry_run else "removed"
    kept_by = plural(len(roots), "root") + (" and the given files" if targets else "")
    click.echo(f"{verb} {plural(len(report.removed), 'output')} and {plural(len(report.leftovers), 'leftover')}, "
               f"{report.freed_bytes / 1e6:.1f} MB freed{' (dry run)' if dry_run else ''}; "
               f"kept {report.reachable} reachable (by {kept_by})")
    if report.problems:
        raise MarinError(f"{plural(len(report.problems), 'output')} left alone: a record of each cannot be read "
                         "(listed above)", hint="`marin verify OUTPUT` checks one; fix or remove the damaged record, "
                                                "then collect again", exit_code=1)


def _say(report: Any, going: str, spared: dict[str, str]) -> None:
    """One line per output and leftover found: ``going`` it, or kept (``spared``: why)."""
    from marin.cli.text import format_bytes

    for e in report.entries:
        if e.folder in spared:
            click.echo(f"kept {e.folder} ({spared[e.folder]})")
        else:
            click.echo(f"{going} {e.folder} ({format_bytes(e.bytes)}{', a model' if e.model else ''}): {e.why}")
    for left in report.leftovers:
        click.echo(f"{going} {left.path} ({format_bytes(left.bytes)}): {left.kind}")


def _remove(store: Any, report: Any, keep: set[str]) -> None:
    """Remove what was found, under the store's collection lease."""
    from marin.execution.store.gc import remove_garbage
    from marin.execution.store.run_roots import CollectionBusy

    try:
        remove_garbage(store, report, keep=keep)
    except CollectionBusy as e:
        raise MarinError(str(e), hint="run `marin gc` again later", exit_code=1) from None
    except ValueError as e:  # a damaged root: never read as keeping nothing
        raise MarinError(f"{e}; nothing removed", hint="fix or remove the record named above") from None


def _confirmed(models: list[Any]) -> bool:
    """A yes at a terminal to removing ``models`` (False when nobody can be asked)."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return False
    return click.confirm(f"remove {len(models)} model(s) listed above?", default=False)
