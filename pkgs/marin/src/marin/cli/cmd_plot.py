"""``marin plot``: the training curves of one step as a PNG, for terminal users."""

from __future__ import annotations

import os

import click

from marin.cli.common import prefix_option, resolve_output
from marin.cli.errors import MarinError


def _find_metrics(ctx: click.Context, what: str, prefix: str | None) -> tuple[str, str]:
    """(output folder or metrics file, display name) for a metrics file, or a step's output as
    every verb names one (:func:`marin.cli.common.resolve_output`)."""
    from marin.execution.store.layout import META_DIR
    from marin.report.outputs import METRICS_FILE
    from rigging import filesystem as fs

    what = what.rstrip("/")
    if what.endswith(".jsonl") or fs.exists(fs.join(what, METRICS_FILE)):
        # A metrics file, or a folder holding one (a training run's output, made by marin or not).
        return what, os.path.basename(what) or what
    if fs.exists(what) and not fs.exists(fs.join(what, META_DIR)):
        raise MarinError(f"no {METRICS_FILE} in {what}", hint="give the output folder or name of a training step")
    output = resolve_output(ctx, what, prefix, finished=False, files=True)
    if not fs.exists(fs.join(output, METRICS_FILE)):
        raise MarinError(f"no {METRICS_FILE} in {output}: not a training step, or it has not logged yet",
                         hint="give the output folder or name of a training step, e.g. checkpoints/<name>-<hash>")
    return output, what


@click.command("plot")
@click.argument("path", metavar="PATH")
@prefix_option
@click.option("-o", "--output", "output", default="loss.png", show_default=True, metavar="FILE",
              help="Where to write the PNG.")
@click.option("--width", type=click.IntRange(min=100, max=10000), default=1000, show_default=True,
              help="Image width in pixels.")
@click.option("--height", type=click.IntRange(min=100, max=10000), default=700, show_default=True,
              help="Image height in pixels.")
@click.pass_context
def plot(ctx: click.Context, path: str, prefix: str | None, output: str, width: int, height: int) -> None:
    """Draw the training curves of the step at PATH (its output folder, or a step name) as a PNG."""
    from marin.report.outputs import read_metrics
    from marin.report.plot import plot_metrics
    from rigging import filesystem as fs

    source, name = _find_metrics(ctx, path, prefix)
    metrics = read_metrics(source)
    if metrics is None:
        raise MarinError(f"{source} has no logged training steps yet", hint="wait for the step to log, then plot again")
    try:
        png = plot_metrics(metrics, width=width, height=height, title=name)
    except ValueError as e:
        raise MarinError(f"{source}: {e}", hint="the metrics need a loss, lr, tokens_per_s, grad_norm or mfu column") from None
    if fs.is_local(output):
        output = os.path.abspath(fs.strip_protocol(output))
        os.makedirs(os.path.dirname(output), exist_ok=True)
    fs.atomic_write(output, png)
    click.echo(f"plot: {output} ({width}x{height}, {metrics.rows} logged steps)")
