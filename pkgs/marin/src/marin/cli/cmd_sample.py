"""``marin sample``: generate text from a trained step's final parameters, on the key/value-cache decoder."""

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
@click.option("--top-k", type=click.IntRange(min=0), default=0, show_default=True,
              help="Draw only among the K most likely tokens (0: all).")
@click.option("--top-p", type=click.FloatRange(0.0, 1.0, min_open=True), default=1.0, show_default=True,
              help="Draw only within the smallest set of likeliest tokens whose probability reaches P.")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True,
              help="Sample K draws with seed completion_seed(SEED, 0, K), as a generations(...) step does.")
@click.option("--samples", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Continuations to draw (each printed after a `--- sample K` line when more than one).")
@click.option("--chat", is_flag=True, help="PROMPT is a user turn: render it with the model's chat template "
              "and print the assistant's reply (until the template's end token).")
@click.option("--system", default=None, help="With --chat: a system turn before the user's.")
@prefix_option
@click.pass_context
def sample(ctx: click.Context, path: str, prompt: str, max_new_tokens: int, temperature: float, top_k: int,
           top_p: float, seed: int, samples: int, chat: bool, system: str | None, prefix: str | None) -> None:
    """Continue PROMPT with the model of a finished training step (output folder or step name)."""
    from marin.cli.accelerator import take_accelerator
    from marin.experiment.training.sampling import sample_completions

    output = resolve_output(ctx, path, prefix, files=True)
    if not prompt.strip():
        raise MarinError("--prompt must not be empty")
    if system is not None and not chat:
        raise MarinError("--system is only meaningful with --chat")
    take_accelerator(ctx, wait=False)
    try:
        rendered, texts = sample_completions(output, prompt, n=samples, max_new_tokens=max_new_tokens,
                                             temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                                             chat=chat, system=system)
    except FileNotFoundError as e:
        hint = "sample without --chat, or fine-tune on tokenized_chat(...) data" if chat else None
        raise MarinError(str(e), hint=hint) from None
    except ValueError as e:
        raise MarinError(str(e)) from None
    for k, text in enumerate(texts):
        if samples > 1:
            click.echo(f"--- sample {k}")
        click.echo(rendered + text)
