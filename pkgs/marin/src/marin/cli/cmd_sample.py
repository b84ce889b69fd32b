"""``marin sample``: generate text from a trained step's final parameters."""

from __future__ import annotations

import click

from marin.cli.common import load_config, prefix_option
from marin.cli.errors import MarinError

_JAX_BACKEND_PROBE_LOGGER = "jax._src.xla_bridge"


@click.command("sample")
@click.argument("path", metavar="PATH|NAME")
@click.option("--prompt", required=True, help="Text to continue.")
@click.option("-n", "--max-new-tokens", type=click.IntRange(1, 4096), default=48, show_default=True)
@click.option("--temperature", type=click.FloatRange(min=0.0), default=0.0, show_default=True,
              help="0 picks the most likely token each time.")
@click.option("--seed", type=int, default=0, show_default=True)
@prefix_option
@click.pass_context
def sample(ctx: click.Context, path: str, prompt: str, max_new_tokens: int, temperature: float, seed: int,
           prefix: str | None) -> None:
    """Continue PROMPT with the model of a finished training step (output folder or step name)."""
    import logging

    from marin.execution.store import StepRecord, StepStore
    from marin.experiment.sampling import sample_text
    from rigging import filesystem as fs

    output = path.rstrip("/")
    if not fs.exists(fs.join(output, "final")):
        store = StepStore(load_config(ctx, prefix=prefix).resolved_prefix())
        builds = store.earlier_builds(path)
        if not builds:
            raise MarinError(f"{path} is neither a trained step's output folder nor a finished step name",
                             hint="give the output path printed by `marin run`, or a name like checkpoints/marin-nano")
        output = builds[0][0]
    if not StepRecord(output).is_done():
        raise MarinError(f"{output} is not a finished step", hint="run the training step to completion first")
    if not prompt.strip():
        raise MarinError("--prompt must not be empty")
    if not (ctx.obj and ctx.obj.get("verbose")):
        # JAX reports each accelerator backend it probes and does not find (INFO); not news here.
        logging.getLogger(_JAX_BACKEND_PROBE_LOGGER).setLevel(logging.WARNING)
    click.echo(prompt + sample_text(output, prompt, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed))
