"""``marin show``: the provenance of one step's output."""

from __future__ import annotations

import json

import click

from marin.cli.common import prefix_option, resolve_output
from marin.cli.errors import MarinError


@click.command("show")
@click.argument("what", metavar="PATH|NAME")
@prefix_option
@click.pass_context
def show(ctx: click.Context, what: str, prefix: str | None) -> None:
    """Print the provenance of an output folder, or of the newest build of a step NAME."""
    from marin.execution.store.step_record import StepRecord

    record = StepRecord(resolve_output(ctx, what, prefix, finished=False))
    provenance = record.read_provenance()
    status = record.read_status_record()
    if provenance is None and status is None:
        raise MarinError(f"{record.output_path} has no provenance or status record")
    done = record.is_done()
    written = status.state.value if status is not None and status.state is not None else "unknown"
    body = {**(provenance.to_json() if provenance is not None else {}), "state": "done" if done else written,
            "output_path": record.output_path}
    if not done and status is not None:
        body["last_attempt"] = status.to_json()
    click.echo(json.dumps(body, indent=2, sort_keys=True, default=str))
