"""``marin show``: one build of a step, summarised for people (``--json``: its raw records)."""

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
@click.option("--json", "as_json", is_flag=True,
              help="Print the raw records (provenance, state, the last attempt's status) as JSON.")
@click.pass_context
def show(ctx: click.Context, what: str, prefix: str | None, as_json: bool) -> None:
    """Summarise an output folder, or the newest build of a step NAME: its state, when and where it
    was built, its size, what it read, what it holds (a data step's counts, a training run's
    results, an evaluation's scores) and its config as a tree. When NAME was built more than once, a
    line on stderr says which build it shows."""
    from marin.execution.store.step_record import StepRecord

    found = resolve_outputs(ctx, what, prefix)
    if len(found) > 1:
        click.echo(builds_note(what.rstrip("/"), found), err=True)
    record = StepRecord(found[0][0])
    provenance = record.read_provenance()
    status = record.read_status_record()
    if provenance is None and status is None:
        raise MarinError(f"{record.output_path} has no provenance or status record")
    if as_json:
        done = record.is_done()
        written = status.state.value if status is not None and status.state is not None else "unknown"
        body = {**(provenance.to_json() if provenance is not None else {}), "state": "done" if done else written,
                "output_path": record.output_path}
        if not done and status is not None:
            body["last_attempt"] = status.to_json()
        click.echo(json.dumps(body, indent=2, sort_keys=True, default=str))
        return
    from marin.cli.common import store_of
    from marin.cli.show_summary import render, summary_sections

    under = store_of(ctx, prefix).prefix.rstrip("/") + "/"
    output_name = record.output_path.removeprefix(under)
    click.echo(render(summary_sections(record, provenance, status, output_name=output_name)))
    click.echo(f"\nevery record: marin show {what}{' --prefix ' + prefix if prefix else ''} --json")


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
