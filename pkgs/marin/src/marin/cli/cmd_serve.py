"""``marin serve MODEL``: the model behind an OpenAI-compatible HTTP API (:mod:`marin.serve`)."""

from __future__ import annotations

import os

import click

from marin.cli.common import prefix_option
from marin.cli.errors import MarinError


@click.command("serve")
@click.argument("model", metavar="MODEL")
@click.option("--step", type=click.IntRange(min=1), default=None,
              help="Serve this kept checkpoint of a training run instead of its final parameters.")
@click.option("--ema", is_flag=True, help="Serve the run's average of its parameters (trained with ema=).")
@click.option("--name", default=None, help="The model's id in the API (default: MODEL as given).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0: every interface; give --api-key then).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="Port to listen on (0: a free one, printed).")
@click.option("--api-key", default=None, envvar="MARIN_SERVE_API_KEY",
              help="Answer only requests with `Authorization: Bearer KEY` (or $MARIN_SERVE_API_KEY).")
@click.option("--slots", type=click.IntRange(1, 1024), default=16, show_default=True,
              help="Requests decoded at once (each holds a cache of --max-len positions).")
@click.option("--max-len", type=click.IntRange(min=2), default=None,
              help="Positions per request, prompt and completion together (default: the model's context).")
@click.option("--steps-per-sync", type=click.IntRange(1, 256), default=8, show_default=True,
              help="Tokens decoded per trip to the device (a new request waits at most this many).")
@click.option("--cpu", is_flag=True, help="Compute on the CPU even where the host has an accelerator.")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16"]), default=None,
              help="Precision of the computation (default: bfloat16 on an accelerator, float32 on the CPU).")
@prefix_option
@click.pass_context
def serve(ctx: click.Context, model: str, step: int | None, ema: bool, name: str | None, host: str, port: int,
          api_key: str | None, slots: int, max_len: int | None, steps_per_sync: int, cpu: bool, dtype: str | None,
          prefix: str | None) -> None:
    """Serve MODEL (a training step's output folder or name, a Hugging Face folder, or a model id in the
    hub cache) at /v1/models, /v1/completions and /v1/chat/completions until Ctrl-C."""
    from marin.cli.accelerator import take_accelerator
    from marin.cli.common import load_config

    load_config(ctx, prefix=prefix)
    # The name is resolved before the accelerator is taken: resolving reads the configuration,
    # which hides the accelerator from the command's own process again (as marin sample does).
    folder = _folder(ctx, model, prefix)
    device = "cpu" if cpu else take_accelerator(ctx, wait=True)
    loaded = _load(folder, step, ema)
    if max_len is not None and max_len > loaded.context:
        raise MarinError(f"--max-len {max_len} exceeds the model's context of {loaded.context} tokens")
    from levanter.config import ComputeDtype

    compute = ComputeDtype(dtype or ("float32" if device == "cpu" else "bfloat16"))
    _run(loaded, name or model, host, port, api_key, f"{device}, {compute.value}", slots=slots, max_len=max_len,
         steps_per_sync=steps_per_sync, compute_dtype=compute)


def _folder(ctx: click.Context, model: str, prefix: str | None) -> str:
    """Where MODEL is: a folder as given, else a step or output name under the prefix, else (as
    given) a Hugging Face id."""
    from marin.cli.common import resolve_output

    if os.path.exists(model) or "://" in model:
        return model
    try:
        return resolve_output(ctx, model, prefix, files=True)
    except MarinError:
        if model.count("/") != 1:  # not a Hub id either
            raise
        return model


def _load(folder: str, step: int | None, ema: bool):
    """The model at ``folder`` (see :func:`_folder`)."""
    from marin.experiment.chat.template import TemplateError
    from marin.experiment.generation.model import ModelNotFound, load_generation_model

    try:
        return load_generation_model(folder, step=step, ema=ema)
    except ModelNotFound as e:
        raise MarinError(str(e), hint="give a train_lm output (folder or step name), an export_hf folder, or "
                                      "a Hugging Face model id in the hub cache") from None
    except TemplateError as e:
        raise MarinError(f"the model's chat template: {e}", hint="fix or remove the file named") from None


def _run(model, name: str, host: str, port: int, api_key: str | None, device: str, **engine_options) -> None:
    import socket

    import uvicorn

    from marin.serve.api import MAX_TOP_LOGPROBS
    from marin.serve.app import create_app
    from marin.serve.engine_loop import EngineLoop

    try:
        sock = socket.create_server((host, port))
    except OSError as e:
        raise MarinError(f"cannot listen on {host}:{port}: {e.strerror}", hint="pick another --port") from None
    engine = EngineLoop(model.engine(top_logprobs=MAX_TOP_LOGPROBS, **engine_options))
    engine.start()
    bound = sock.getsockname()[1]
    click.echo(f"serving {name} at http://{host}:{bound}/v1 on {device} ({engine_options['slots']} slots of "
               f"{engine.engine.max_len} positions); Ctrl-C stops", err=True)
    config = uvicorn.Config(create_app(model, engine, name=name, api_key=api_key), log_level="warning",
                            timeout_graceful_shutdown=10)
    try:
        # uvicorn stops on SIGINT/SIGTERM: no new connections, in-flight answers finished (or cut
        # after the graceful timeout); then what is left in the decoder is cancelled. It raises the
        # signal again once it has stopped: that is the end asked for, not an error.
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        engine.stop()
        sock.close()
    click.echo(f"stopped: {engine.submitted} requests served, {engine.cancelled} cancelled", err=True)
