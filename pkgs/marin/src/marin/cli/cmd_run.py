"""``marin run``: build the targets' steps that are not built yet."""

from __future__ import annotations

import sys
from typing import Any

import click

from marin.cli.common import (
    backend_options,
    cache_options,
    prefix_option,
    runner_from_options,
    targets_argument,
)
from marin.cli.errors import MarinError


@click.command("run")
@targets_argument
@prefix_option
@click.option("-j", "--max-parallel", type=click.IntRange(min=1), default=None, help="Steps run at once.")
@click.option("--force", multiple=True, metavar="GLOB", help="Rebuild matching steps even if cached.")
@click.option("--only", multiple=True, metavar="GLOB", help="Build only matching steps (and their dependencies).")
@click.option("--dry-run", is_flag=True, help="Print the plan; run nothing.")
@click.option("--require-cached", is_flag=True,
              help="Fail, naming the steps, if anything would have to be built (cache hits are fine).")
@click.option("--budget", metavar="DURATION", default=None,
              help="Refuse to start if the plan's estimated wall time exceeds this (2h, 1h30m, 45m, seconds).")
@click.option("--budget-accelerator-hours", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="HOURS", help="Refuse to start if the plan is estimated to use more accelerator-hours.")
@click.option("--warm-workers/--no-warm-workers", default=None,
              help="Fork local steps from a warm worker that keeps its imports, and run those that compute with "
                   "JAX on a host without an accelerator in warm processes that keep JAX (the default; accelerator "
                   "steps: accelerator_process; multi-host steps always get a fresh interpreter); "
                   "--no-warm-workers starts one per step. "
                   "Config: warm_workers, warm_worker_max_steps.")
@click.option("--code-changes", type=click.Choice(["warn", "rebuild"]), default=None,
              help="A built step whose code changed since its build (same version): keep it (warn, the default; "
                   "`marin plan` names it) or rebuild it. Config: code_changes.")
@click.option("--root", "root_name", metavar="NAME", default=None,
              help="Register the run's GC root under NAME (default: an id of the targets, user and host); "
                   "`marin roots` lists them.")
@click.option("--no-fast", is_flag=True,
              help="Plan in full even when this exact command's no-op record still holds (and write none). "
                   "Also MARIN_NO_FAST_NOOP=1, or fast_noop: false in the configuration.")
@cache_options
@backend_options
@click.pass_context
def run(ctx: click.Context, targets: tuple[str, ...], prefix: str | None, max_parallel: int | None,
        force: tuple[str, ...], only: tuple[str, ...], dry_run: bool, require_cached: bool, budget: str | None,
        budget_accelerator_hours: float | None, caches: tuple[str, ...], strict_env: bool | None,
        backend: str | None, ray_address: str | None, warm_workers: bool | None = None,
        code_changes: str | None = None, no_fast: bool = False, root_name: str | None = None) -> None:
    """Build TARGET... (files, modules, FILE:attr or folders of experiments)."""
    from marin.cli.display import make_reporter, summary_table
    from marin.cli.targets import load_targets
    from marin.execution.plan.estimate import parse_duration
    from rigging.store_requests import describe_counts

    try:
        budget_s = parse_duration(budget) if budget is not None else None
    except ValueError as e:
        raise MarinError(f"--budget: {e}") from None
    if root_name is not None:
        from marin.execution.store.roots import check_root_name

        try:
            check_root_name(root_name)
        except ValueError as e:
            raise MarinError(f"--root: {e}") from None
    from marin.cli.noop_recording import unwatch_calls, watch_calls  # light: the standard library only

    # A recording command watches what the experiment's own code calls while it is imported and
    # until its plan is made: a dependency's handle is lowered while planning (an ArtifactStep's
    # build_config). The reporter stops it once the plan is known (_InputsChecked.planned).
    watch_calls()
    try:
        steps = load_targets(list(targets))
    except BaseException:
        unwatch_calls()
        raise
    keeper = _RootKeeper(targets, root_name, partial=bool(only))  # --only plans part of the graph
    reporter = make_reporter() if dry_run else _InputsChecked(make_reporter(), keeper)
    runner = runner_from_options(ctx, prefix=prefix, max_parallel=max_parallel, force=force, only=only,
                                 dry_run=dry_run, reporter=reporter, caches=caches, strict_env=strict_env,
                                 require_cached=require_cached, backend=backend, ray_address=ray_address,
                                 budget_s=budget_s, budget_accelerator_hours=budget_accelerator_hours,
                                 warm_workers=warm_workers, code_changes=code_changes)
    keeper.prefix = runner.store.prefix
    try:
        result = runner.run(steps)  # NotCached, OverBudget, ResourcesTooLarge ...: the CLI's one error funnel
    finally:
        unwatch_calls()
        reporter.close()
        runner.close()
    click.echo(summary_table(result))
    click.echo(f"prefix: {result.prefix}")
    requests = describe_counts(result.store_requests)
    if requests:
        click.echo(f"store: {requests}")
    for line in _scores(result):
        click.echo(line)
    if not dry_run:
        from marin.report.run_report import write_run_report

        report = write_run_report(result, runner.store)
        click.echo(f"report: {report}")
        if not no_fast:
            from marin.cli.noop_depends import offer_noop_record  # here: only a run that ends well offers one

            offer_noop_record(result, runner.settings, (ctx.obj or {}).get("config"), targets, report)
    if not result.ok:
        for s in result.failed:
            click.echo(f"failed: {s.name}: {(s.error or '').splitlines()[0] if s.error else ''}", err=True)
            if s.log_path:  # none when no attempt started (the accelerator stayed held by another process)
                click.echo(f"  log: {s.log_path}", err=True)
        raise MarinError(f"{len(result.failed)} step(s) failed: {', '.join(s.name for s in result.failed)}",
                         hint="read the logs above, fix, and run again (finished steps stay cached)", exit_code=1)
    sys.stdout.flush()


def _scores(result: Any) -> list[str]:
    """The scores of the evaluations this run built, under each eval step's name."""
    evaluation = sys.modules.get("marin.experiment.evaluation.eval")
    if evaluation is None or result.plan is None:
        return []  # no step of this run was made by evaluate(...): its config class was never imported
    from marin.execution.run.outcome import Outcome
    from marin.execution.store.step_record import StepRecord
    from marin.experiment.evaluation.results import read_eval_results, score_lines

    evals = {(p.name, p.hash) for p in result.plan.steps if evaluation.writes_eval_results(p.step)}
    lines = []
    for s in result.steps:
        if s.outcome not in (Outcome.RAN, Outcome.REUSED) or (s.name, s.hash) not in evals:
            continue
        found = read_eval_results(StepRecord(s.output_path).files_folder())
        if found is not None and (found.tasks or found.datasets):
            lines += [f"scores: {s.name}", *(f"  {line}" for line in score_lines(found))]
    return lines


class _RootKeeper:
    """Registers the run's GC root (:mod:`marin.execution.store.roots`) as soon as its plan is
    known, before anything is built, so that a ``marin gc`` meanwhile keeps what the run reads;
    again when the plan grows (steps a built step's output decides)."""

    def __init__(self, targets: tuple[str, ...], name: str | None, *, partial: bool = False):
        self.targets, self.name, self.partial = targets, name, partial
        self.prefix: str | None = None
        self.outputs: set[str] = set()

    def add(self, plan: Any) -> None:
        outputs = {p.output_name for p in plan.steps}
        if self.prefix is None or outputs <= self.outputs:
            return
        from marin.execution.store.roots import GcRoot, register_root

        self.outputs |= outputs
        root = GcRoot.for_run(self.targets, self.outputs, name=self.name)
        try:
            register_root(self.prefix, root, merge=self.partial)
        except OSError as e:  # a store this user may read but not write: the run itself may need no write
            click.echo(f"warning: GC root {root.id} not registered under {self.prefix} ({type(e).__name__}: {e}); "
                       "`marin gc` keeps these outputs only for the roots and files it is given", err=True)


class _InputsChecked:
    """The run's reporter, told of the plan once what its steps will read from this machine is
    there: a benchmark task's dataset missing from the hub cache is a user error before anything
    runs, not a failed step after the model trained. It registers the run's GC root then."""

    def __init__(self, reporter: Any, keeper: _RootKeeper):
        self._reporter = reporter
        self._keeper = keeper

    def planned(self, plan: Any) -> None:
        from marin.cli.noop_recording import abandon, unwatch_calls  # light: the standard library only

        unwatch_calls()  # the plan is made: what the experiment's code did to make it was watched
        self._keeper.add(plan)
        to_run = plan.to_run()
        if to_run:
            abandon()  # a run that builds leaves no no-op record: stop noting what it reads
            # The harness's task settings: only when there is something to build.
            from marin.experiment.evaluation.tasks import check_task_data

            check_task_data(p.step for p in to_run)
        self._reporter.planned(plan)

    def expanded(self, planned: Any, plan: Any, new_steps: Any) -> None:
        self._keeper.add(plan)
        self._reporter.expanded(planned, plan, new_steps)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reporter, name)
