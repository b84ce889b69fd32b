"""``marin verify``: re-check the manifests of the finished steps of TARGET...."""

from __future__ import annotations

import click

from marin.cli.common import prefix_option, runner_from_options, targets_argument
from marin.cli.errors import MarinError


@click.command("verify")
@targets_argument
@prefix_option
@click.pass_context
def verify(ctx: click.Context, targets: tuple[str, ...], prefix: str | None) -> None:
    """Report outputs of TARGET... that changed or vanished after they were built (exit 1 if any)."""
    from marin.cli.targets import load_targets
    from marin.execution.store.verify import Verdict, verify_output

    steps = load_targets(list(targets))
    runner = runner_from_options(ctx, prefix=prefix)
    plan = runner.plan(steps, explain=False)
    bad = []
    for p in plan.steps:
        check = verify_output(p.name, p.output_path)
        if check.verdict is Verdict.OK:
            detail = f"{check.files} files match the manifest"
        elif check.verdict is Verdict.NOT_BUILT:
            detail = "nothing to check"
        else:
            shown = "; ".join(check.problems[:3])
            more = len(check.problems) - 3
            detail = shown + (f"; and {more} more" if more > 0 else "")
            bad.append(p.name)
        click.echo(f"{check.verdict.value:9s} {p.output_name}: {detail}")
    if bad:
        raise MarinError(f"{len(bad)} finished step(s) no longer match their manifests: {', '.join(bad)}",
                         hint="rebuild them with `marin run TARGET --force NAME` (or restore the files)",
                         exit_code=1)
    click.echo(f"verified {len(plan.steps)} steps under {runner.store.prefix}: no problems")
