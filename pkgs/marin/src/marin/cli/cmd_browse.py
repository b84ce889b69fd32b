"""``marin browse``: a local, read-only web server over the store (prints its URL, opens nothing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from marin.cli.common import prefix_option, store_of

if TYPE_CHECKING:
    from marin.execution.store.store import StepStore
    from marin.report.model import ReportData


@click.command("browse")
@click.argument("targets", nargs=-1, metavar="[TARGET...]")
@prefix_option
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port to listen on (0: any free port).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (the default lets in this machine alone).")
@click.pass_context
def browse(ctx: click.Context, targets: tuple[str, ...], prefix: str | None, port: int, host: str) -> None:
    """Serve a browser of the store: the step graph (of TARGET..., or of every finished step), and
    each step's documents, attributes, duplicate clusters, comparisons, curves and samples.

    Read-only: nothing in the store is changed, and no path outside it is served.
    """
    # Imported here: the other verbs never load the server and the readers of documents.
    from marin.cli.errors import MarinError
    from marin.report.browse.server import make_server

    store = store_of(ctx, prefix)
    graph = _graph(ctx, list(targets), prefix, store)
    try:
        server = make_server(store, graph, host=host, port=port, verbose=bool(ctx.obj and ctx.obj.get("verbose")))
    except OSError as e:
        raise MarinError(f"cannot listen on {host}:{port}: {e.strerror or e}",
                         hint="choose another port with --port (0 picks a free one)") from None
    bound_host, bound_port = server.server_address[:2]
    shown = f"[{bound_host}]" if ":" in str(bound_host) else bound_host
    click.echo(f"marin browse: {store.prefix}")
    click.echo(f"  http://{shown}:{bound_port}/   (read-only; Ctrl-C stops it)", nl=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        click.echo("stopped")
    finally:
        server.server_close()


def _graph(ctx: click.Context, targets: list[str], prefix: str | None, store: StepStore) -> Callable[[], ReportData]:
    """What the graph page draws: a plan of ``targets`` against the store, or every finished step."""
    from marin.report.collect import collect_plan, collect_store

    if not targets:
        return lambda: collect_store(store, title=f"marin browse: {store.prefix}")
    from marin.cli.common import runner_from_options
    from marin.cli.targets import load_targets

    steps = load_targets(targets)
    runner = runner_from_options(ctx, prefix=prefix)
    title = f"marin browse: {' '.join(targets)}"
    return lambda: collect_plan(runner.plan(steps, explain=True, note_env=True), title=title)
