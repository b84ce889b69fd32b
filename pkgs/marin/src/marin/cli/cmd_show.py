"""``marin show``: the provenance of one step's output."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import click

from marin.cli.common import prefix_option, resolve_outputs
from marin.cli.errors import MarinError

if TYPE_CHECKING:
    from marin.execution.store.provenance_record import Provenance


@click.command("show")
@click.argument("what", metavar="PATH|NAME")
@prefix_option
@click.pass_context
def show(ctx: click.Context, what: str, prefix: str | None) -> None:
    """Print the provenance of an output folder, or of the newest build of a step NAME (saying so,
    on stderr, when NAME was built more than once)."""
    from marin.execution.store.step_record import StepRecord

    found = resolve_outputs(ctx, what, prefix)
    if len(found) > 1:
        click.echo(builds_note(what.rstrip("/"), found), err=True)
    record = StepRecord(found[0][0])
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


def builds_note(name: str, builds: list[tuple[str, Provenance | None]]) -> str:
    """``3 builds of NAME: showing the newest, NAME-<hash> (when); others: ...`` for a step name's
    finished builds (output path, provenance), newest first."""

    def described(path: str, provenance: Provenance | None) -> str:
        when = provenance.finished_at if provenance is not None else None
        stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(when)) if when is not None else "time unknown"
        return f"{name}-{path.rstrip('/').rpartition('-')[2]} ({stamp})"

    (newest, *others) = [described(path, provenance) for path, provenance in builds]
    return (f"{len(builds)} builds of {name}: showing the newest, {newest}; others: {', '.join(others)}; "
            f"`marin show {name}-<hash>` shows one of them")
