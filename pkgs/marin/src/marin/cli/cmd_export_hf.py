"""``marin export-hf``: write a trained model as a Hugging Face ``LlamaForCausalLM`` folder."""

from __future__ import annotations

import click

from marin.cli.common import prefix_option, resolve_output
from marin.cli.errors import MarinError


def _checkpoint(value: str) -> str | int:
    from marin.experiment.hf import FINAL

    if value == FINAL:
        return FINAL
    if value.isdigit() and int(value) > 0:
        return int(value)
    raise click.BadParameter(f"must be {FINAL!r} or a positive step number, got {value!r}")


@click.command("export-hf")
@click.argument("path", metavar="PATH|NAME")
@click.option("-o", "--output", "out_dir", required=True, metavar="DIR",
              help="Folder to write (local or gs://); files of the same names are replaced.")
@click.option("--checkpoint", default="final", show_default=True, metavar="final|STEP",
              help="The final parameters, or the step of a checkpoint the run kept.")
@prefix_option
@click.pass_context
def export_hf(ctx: click.Context, path: str, out_dir: str, checkpoint: str, prefix: str | None) -> None:
    """Write the model of a training step (output folder or step name) in Hugging Face's layout."""
    from marin.experiment.hf import FINAL, write_hf_folder

    step = _checkpoint(checkpoint)
    output = resolve_output(ctx, path, prefix, finished=step == FINAL, files=True)
    try:
        write_hf_folder(output, out_dir, step)
    except FileNotFoundError as e:
        raise MarinError(str(e), hint="for --checkpoint, give a step the run kept (see its checkpoints/ folder)") from None
    click.echo(f"wrote {out_dir} (from {output}, checkpoint {step}); load it with "
               f"transformers' AutoModelForCausalLM.from_pretrained and AutoTokenizer.from_pretrained")
