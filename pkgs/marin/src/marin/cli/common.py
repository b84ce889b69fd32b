"""Options and helpers shared by the verbs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

__all__ = ["backend_options", "cache_options", "gc_roots", "load_config", "prefix_option", "quiet_library_logs",
           "reached_outputs", "resolve_output", "resolve_outputs", "runner_from_options", "store_of",
           "targets_argument"]


def prefix_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--prefix", default=None, metavar="URL",
                        help="Where outputs live (local folder, gs://bucket/path, memory://).")(fn)


def targets_argument(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.argument("targets", nargs=-1, required=True, metavar="TARGET...")(fn)


def load_config(ctx: click.Context, **overrides: Any):
    """The configuration, with the verb's overrides; logging set up as it says, and the host's
    accelerator hidden from this process (:func:`marin.cli.accelerator.hide_from_cli`)."""
    from marin.cli.accelerator import hide_from_cli
    from rigging.config.discovery import discover_config
    from rigging.log import setup_logging

    config = discover_config(overrides)
    verbose = bool(ctx.obj and ctx.obj.get("verbose"))
    setup_logging("DEBUG" if verbose else config.log_level)
    accelerator = hide_from_cli(config)
    if isinstance(ctx.obj, dict):
        ctx.obj["config"] = config  # for the verb's later questions (`marin run`: fast_noop)
        ctx.obj["accelerator"] = accelerator
    return config


def cache_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--cache URL (repeatable) and --strict-env, shared by run and plan."""
    fn = click.option("--strict-env", is_flag=True, default=None,
                      help="Make the environment fingerprint part of every step's hash.")(fn)
    return click.option("--cache", "caches", multiple=True, metavar="URL",
                        help="Read-only cache (another prefix) to fetch finished steps from; repeatable.")(fn)


def backend_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--backend local|ray and --ray-address ADDR (default: the configuration's)."""
    fn = click.option("--ray-address", default=None, metavar="ADDR",
                      help="Ray cluster to run on (host:port or auto); unset: start a private local one.")(fn)
    return click.option("--backend", type=click.Choice(["local", "ray"]), default=None,
                        help="Where steps run: local processes, or a Ray cluster.")(fn)


def runner_from_options(ctx: click.Context, *, prefix: str | None, reporter: Any = None,
                        caches: tuple[str, ...] = (), strict_env: bool | None = None,
                        backend: str | None = None, ray_address: str | None = None, **kwargs: Any):
    """The runner the options ask for: the configuration with the flags over it, then the run's own
    settings (``kwargs``: ``force``, ``dry_run``, ``budget_s`` ...), made once into its ``RunSettings``."""
    from marin.execution.run.runner import StepRunner
    from marin.execution.run.settings import RunSettings

    config = load_config(ctx, prefix=prefix, max_parallel=kwargs.pop("max_parallel", None),
                         caches=list(caches) or None, strict_env=strict_env, backend=backend,
                         ray_address=ray_address)
    return StepRunner(RunSettings.of(config, **kwargs), reporter=reporter)


def store_of(ctx: click.Context, prefix: str | None) -> Any:
    """The store the options and configuration name: ``--prefix``, else the configured prefix, else
    the workspace's ``.marin/store`` (a ``marin.execution.store.store.StepStore``)."""
    from marin.execution.store.store import StepStore

    return StepStore(load_config(ctx, prefix=prefix).resolved_prefix())


def gc_roots(store: Any) -> list[Any]:
    """The GC roots of ``store`` (``marin.execution.store.roots.GcRoot``); a damaged one is a user error."""
    from marin.cli.errors import MarinError
    from marin.execution.store.roots import read_roots

    try:
        return read_roots(store.prefix)
    except ValueError as e:
        raise MarinError(str(e)) from None


def reached_outputs(ctx: click.Context, targets: tuple[str, ...], prefix: str | None) -> set[str]:
    """The output names (``<name>-<hash16>``) of every step the experiments ``targets`` reach."""
    from marin.cli.targets import load_targets

    steps = load_targets(list(targets))
    runner = runner_from_options(ctx, prefix=prefix)
    try:
        return {p.output_name for p in runner.plan(steps, explain=False).steps}
    finally:
        runner.close()


def resolve_output(ctx: click.Context, ref: str, prefix: str | None, *, finished: bool = True,
                   files: bool = False) -> str:
    """The output folder ``ref`` names, for every verb that takes one: an output folder, an output
    name under the prefix (``checkpoints/x-<hash>``, as ``marin run`` prints it) or a step name
    (its newest finished build). With ``finished``, a step that has not finished is a user error.
    With ``files``, where its build's files are instead (the attempt folder its records name, if
    any: :mod:`marin.execution.store.layout`), for verbs that read them.
    """
    from marin.cli.errors import MarinError
    from marin.execution.store.step_record import StepRecord

    output = resolve_outputs(ctx, ref, prefix)[0][0]
    if finished and not StepRecord(output).is_done():
        raise MarinError(f"{output} is not a finished step", hint="run the step to completion first")
    return StepRecord(output).files_folder(current=True) if files else output


def resolve_outputs(ctx: click.Context, ref: str, prefix: str | None) -> list[tuple[str, Any]]:
    """Every output folder ``ref`` may mean (:meth:`StepStore.resolve_all
    <marin.execution.store.store.StepStore.resolve_all>`: several for a step name built more than
    once), the one :func:`resolve_output` takes first, each with its provenance when it was read.

    Raises:
        MarinError: ``ref`` names nothing under the prefix.
    """
    from marin.cli.errors import MarinError

    store = store_of(ctx, prefix)
    found = store.resolve_all(ref)
    if not found:
        raise MarinError(f"{ref!r} is not an output folder, nor an output or step name under {store.prefix}",
                         hint="give the output path or name printed by `marin run` (checkpoints/x-<hash>), "
                              "or a step name like checkpoints/marin-nano")
    return found


# Libraries that narrate at INFO: JAX probing backends, Orbax (through absl), and Hugging Face
# ``datasets`` (under the lm-evaluation-harness) announcing at import that JAX is available.
NARRATING_LIBRARIES = ("jax", "absl", "datasets")


def quiet_library_logs(ctx: click.Context) -> None:
    """Hide libraries' INFO narration (:data:`NARRATING_LIBRARIES`) unless ``--verbose`` (given
    before the verb or after it: the second call undoes the first's quieting)."""
    import logging

    verbose = bool(ctx.obj and ctx.obj.get("verbose"))
    for library in NARRATING_LIBRARIES:
        logging.getLogger(library).setLevel(logging.NOTSET if verbose else logging.WARNING)
