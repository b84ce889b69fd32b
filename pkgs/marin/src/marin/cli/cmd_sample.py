"""``marin sample``: generate text from a trained step's final parameters."""

from __future__ import annotations

import click

from marin.cli.common import prefix_option, resolve_output
from marin.cli.errors import MarinError


@click.command("sample")
@click.argument("path", metavar="PATH|NAME")
@click.option("--prompt", required=True, help="Text to continue.")
@click.option("-n", "--max-new-tokens", type=click.IntRange(1, 4096), default=48, show_default=True)
@click.option("--temperature", type=click.FloatRange(min=0.0), default=0.0, show_default=True,
              help="0 picks the most likely token each time.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--chat", is_flag=True, help="PROMPT is a user turn: render it with the model's chat template "
              "and print the assistant's reply (until the template's end token).")
@click.option("--system", default=None, help="With --chat: a system turn before the user's.")
@prefix_option
@click.pass_context
def sample(ctx: click.Context, path: str, prompt: str, max_new_tokens: int, temperature: float, seed: int,
           chat: bool, system: str | None, prefix: str | None) -> None:
    """Continue PROMPT with the model of a finished training step (output folder or step name)."""
    from marin.experiment.training.sampling import sample_chat, sample_text

    output = resolve_output(ctx, path, prefix, files=True)
    if not prompt.strip():
        raise MarinError("--prompt must not be empty")
    if system is not None and not chat:
        raise MarinError("--system is only meaningful with --chat")
    _use_accelerator(ctx)
    if chat:
        try:
            rendered, reply = sample_chat(output, prompt, system=system, max_new_tokens=max_new_tokens,
                                          temperature=temperature, seed=seed)
        except FileNotFoundError as e:
            raise MarinError(str(e), hint="sample without --chat, or fine-tune on tokenized_chat(...) data") from None
        click.echo(rendered + reply)
        return
    click.echo(prompt + sample_text(output, prompt, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed))


def _use_accelerator(ctx: click.Context) -> None:
    """Sampling computes on the host's accelerator (the CLI hid it: give it back), unless another
    process holds it: then one line names the holder rather than libtpu's error."""
    from iris.accelerator_env import reveal_accelerator
    from iris.chip_lock import lock_holder

    found, config = (ctx.obj or {}).get("accelerator"), (ctx.obj or {}).get("config")
    if found is None:
        return
    reveal_accelerator()
    lock = config.accelerator_lock if config is not None and config.accelerator_lock else found.default_lock
    holder = lock_holder(lock) if lock is not None else None
    if holder is not None:
        raise MarinError(f"the accelerator ({found.describe()}) is busy: {holder.describe()}",
                         hint="wait for that process to end (a `marin run` step?), or sample on the CPU with "
                              "JAX_PLATFORMS=cpu MARIN_ACCELERATOR=none")
