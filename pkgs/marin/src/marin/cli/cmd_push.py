"""``marin push``: publish finished steps to a cache, atomically (success record last), signed
when a signing key is configured."""

from __future__ import annotations

import click

from marin.cli.common import prefix_option, runner_from_options, targets_argument


@click.command("push")
@targets_argument
@click.option("--to", "to", required=True, metavar="URL", help="The cache to publish to (another prefix).")
@prefix_option
@click.pass_context
def push(ctx: click.Context, targets: tuple[str, ...], to: str, prefix: str | None) -> None:
    """Copy every finished step of TARGET... to the cache URL with its provenance and manifest.

    With cache_signing_key configured (MARIN_CACHE_SIGNING_KEY) each entry is signed; an entry the
    cache holds already is signed too when it lacks that key's signature (after a key rotation).
    """
    from marin.cli.targets import load_targets
    from marin.execution.store.cache import CacheMiss, push_output, sign_cached
    from marin.execution.store.signing import signing_key
    from marin.execution.store.step_record import StepRecord

    runner = runner_from_options(ctx, prefix=prefix)
    settings = runner.settings
    key = signing_key(settings.cache_signing_key, settings.sources.get("cache_signing_key", "override"))
    steps = load_targets(list(targets))
    plan = runner.plan(steps, explain=False)
    pushed = present = signed = 0
    unfinished = []
    for p in plan.steps:
        if not StepRecord(p.output_path).is_done():
            unfinished.append(p.name)
            continue
        if push_output(p.output_path, to, p.output_name, signing_key=key):  # a CacheMiss reaches the CLI's error funnel
            pushed += 1
            click.echo(f"pushed {p.output_name}" + (f" (signed by {key.name})" if key is not None else ""))
            continue
        present += 1
        if key is None:
            continue
        try:
            if sign_cached(p.output_path, to, p.output_name, key):
                signed += 1
                click.echo(f"signed {p.output_name} (in the cache already) by {key.name}")
        except CacheMiss as e:  # another build of the step is there: never sign what was not built here
            click.echo(f"warning: {e}", err=True)
    in_place = f" ({signed} of them signed now by {key.name})" if key is not None and signed else ""
    click.echo(f"pushed {pushed}, already in cache {present}{in_place}, not finished {len(unfinished)}")
    if unfinished:
        click.echo(f"not finished (run them first): {', '.join(unfinished)}", err=True)
