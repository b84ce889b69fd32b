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
    if chat:
        try:
            rendered, reply = sample_chat(output, prompt, system=system, max_new_tokens=max_new_tokens,
                                          temperature=temperature, seed=seed)
        except FileNotFoundError as e:
            raise MarinError(str(e), hint="sample without --chat, or fine-tune on tokenized_chat(...) data") from None
        click.echo(rendered + reply)
        return
    click.echo(prompt + sample_text(output, prompt, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed))
