"""``marin show``: the provenance of one step's output."""

from __future__ import annotations

import json

import click

from marin.cli.common import load_config, prefix_option
from marin.cli.errors import MarinError


@click.command("show")
@click.argument("what", metavar="PATH|NAME")
@prefix_option
@click.pass_context
def show(ctx: click.Context, what: str, prefix: str | None) -> None:
    """Print the provenance of an output folder, or of the newest build of a step NAME."""
    from marin.execution.store import StepRecord, StepStore
    from rigging import filesystem as fs

    config = load_config(ctx, prefix=prefix)
    store = StepStore(config.resolved_prefix())
    record = StepRecord(what.rstrip("/"))
    if not fs.exists(record.meta):
        record = StepRecord(store.output_path(what.rstrip("/")))
    if fs.exists(record.meta):
        provenance = record.read_json(record.provenance)
        status = record.read_json(record.status)
        if provenance is None and status is None:
            raise MarinError(f"{record.output_path} has no provenance or status record")
        body = provenance or {}
        body = {**body, "state": "done" if record.is_done() else (status or {}).get("state", "unknown"),
                "output_path": record.output_path}
        if not record.is_done() and status:
            body["last_attempt"] = status
        click.echo(json.dumps(body, indent=2, sort_keys=True, default=str))
        return
    builds = store.earlier_builds(what)
    if not builds:
        raise MarinError(f"no output folder or finished step named {what!r} under {store.prefix}",
                         hint="give an output path, or a step name such as hello/stats")
    path, provenance = builds[0]
    click.echo(json.dumps({**provenance, "output_path": path, "state": "done"}, indent=2, sort_keys=True, default=str))
