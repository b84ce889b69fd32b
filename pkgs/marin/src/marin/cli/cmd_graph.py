"""``marin graph``: the step graph as Mermaid or Graphviz dot."""

from __future__ import annotations

import click

from marin.cli.common import prefix_option, runner_from_options, targets_argument


def render(plan, fmt: str) -> str:
    """The plan's graph in ``fmt`` (mermaid or dot), nodes labelled name and short hash."""
    lines = []
    if fmt == "mermaid":
        lines.append("graph TD")
        for i, p in enumerate(plan.steps):
            lines.append(f'  s{i}["{p.name}<br/>{p.hash[:8]} ({p.action.value})"]')
        for i, p in enumerate(plan.steps):
            for d in p.deps:
                lines.append(f"  s{d} --> s{i}")
    else:
        lines.append("digraph marin {")
        lines.append("  rankdir=LR;")
        for i, p in enumerate(plan.steps):
            lines.append(f'  s{i} [label="{p.name}\\n{p.hash[:8]} ({p.action.value})"];')
        for i, p in enumerate(plan.steps):
            for d in p.deps:
                lines.append(f"  s{d} -> s{i};")
        lines.append("}")
    return "\n".join(lines)


@click.command("graph")
@targets_argument
@prefix_option
@click.option("--format", "fmt", type=click.Choice(["mermaid", "dot"]), default="mermaid", show_default=True)
@click.pass_context
def graph(ctx: click.Context, targets: tuple[str, ...], prefix: str | None, fmt: str) -> None:
    """Print the step graph of TARGET...."""
    from marin.cli.targets import load_targets

    steps = load_targets(list(targets))
    runner = runner_from_options(ctx, prefix=prefix)
    click.echo(render(runner.plan(steps, explain=False), fmt))
