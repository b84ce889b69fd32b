"""The ``marin`` command: a Click group with one module per verb (started by :mod:`marin.cli.main`)."""

from __future__ import annotations

import sys
import traceback
from typing import Any

import click

from marin.cli.errors import MarinError
from rigging.config.workspace import fixed_workspace_roots

__all__ = ["cli"]

_COMMANDS = {
    "run": ("marin.cli.cmd_run", "run"),
    "plan": ("marin.cli.cmd_plan", "plan"),
    "status": ("marin.cli.cmd_status", "status"),
    "show": ("marin.cli.cmd_show", "show"),
    "graph": ("marin.cli.cmd_graph", "graph"),
    "gc": ("marin.cli.cmd_gc", "gc"),
    "roots": ("marin.cli.cmd_roots", "roots"),
    "du": ("marin.cli.cmd_du", "du"),
    "config": ("marin.cli.cmd_config", "config"),
    "push": ("marin.cli.cmd_push", "push"),
    "cache": ("marin.cli.cmd_cache", "cache"),
    "sample": ("marin.cli.cmd_sample", "sample"),
    "serve": ("marin.cli.cmd_serve", "serve"),
    "report": ("marin.cli.cmd_report", "report"),
    "plot": ("marin.cli.cmd_plot", "plot"),
    "verify": ("marin.cli.cmd_verify", "verify"),
    "compare": ("marin.cli.cmd_compare", "compare"),
    "export-hf": ("marin.cli.cmd_export_hf", "export_hf"),
    "browse": ("marin.cli.cmd_browse", "browse"),
}


class _UserFacingError(click.ClickException):
    """How every expected failure reaches the terminal: one line, a hint, an exit code."""

    def __init__(self, message: str, hint: str | None, exit_code: int):
        super().__init__(message)
        self.hint = hint
        self.exit_code = exit_code

    def show(self, file: Any = None) -> None:
        file = file or sys.stderr
        click.echo(f"error: {self.format_message()}", file=file)
        if self.hint:
            click.echo(f"hint: {self.hint}", file=file)


def _user_errors() -> list[tuple[type[BaseException], str | None, int]]:
    """Every exception that is the user's to fix: (type, hint, exit code), first match wins."""
    from iris.admission import ResourcesTooLarge
    from levanter.eval_harness.errors import TaskDataUnavailable, UnknownTask
    from marin.execution.core.errors import InvalidStep
    from marin.execution.plan.clashes import NameClashes
    from marin.execution.plan.estimate import OverBudget
    from marin.execution.run.outcome import NotCached
    from marin.execution.store.cache import CacheMiss
    from marin.experiment.data.sources import DataSourceError
    from rigging.config.discovery import ConfigError
    from rigging.secrets import SecretNotFound
    from rigging.store_requests import StoreUnavailable

    return [
        (NameClashes, "give each its own name, or make both from one handle (one name is one step in a graph)", 2),
        (InvalidStep, "fix the step, config or path named above", 2),
        (ConfigError, "fix the configuration source named above (see `marin config`)", 2),
        (ResourcesTooLarge, None, 2),  # the message names the step, the resource and what to do
        (NotCached, "build them where accelerator time is allowed, then `marin push TARGET --to <cache>`", 1),
        (OverBudget, "raise the budget, or plan less (--only, fewer training steps); `marin plan TARGET` shows "
                     "every step's estimate", 1),
        (CacheMiss, "`marin verify TARGET --prefix <that store>` lists what changed; rebuild the step with "
                    "`marin run TARGET --force NAME`", 2),
        (SecretNotFound, None, 2),  # the message says what to export
        (DataSourceError, "check the data source named above", 2),
        (TaskDataUnavailable, None, 2),  # the message names the task, the dataset and what to do
        (UnknownTask, "`lm-eval ls tasks` lists lm-eval's tasks; a task of your own is a YAML file path", 2),
        (StoreUnavailable, "the object store did not answer (its status, the network, credentials?); run again "
                           "once it does: what was built stays built, a stopped step resumes", 1),
    ]


def _user_error(e: BaseException) -> tuple[str, str | None, int] | None:
    """(message, hint, exit code) when ``e`` is the user's error rather than ours."""
    if isinstance(e, MarinError):
        return str(e), e.hint, e.exit_code
    for kind, hint, code in _user_errors():
        if isinstance(e, kind):
            return str(e), hint, code
    if isinstance(e, FileNotFoundError):
        return f"file not found: {e.filename or e}", None, 2
    if isinstance(e, SyntaxError):
        return f"{e.filename}:{e.lineno}: syntax error: {e.msg}", None, 2
    if isinstance(e, ImportError):
        return f"import failed: {e}", "check the module path and that its dependencies are installed", 2
    return None


class _Group(click.Group):
    """Loads verbs lazily (fast start) and turns exceptions into one-line errors."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in _COMMANDS:
            return None
        module_name, attr = _COMMANDS[name]
        import importlib

        command = getattr(importlib.import_module(module_name), attr)
        if not any(p.name == "verbose" for p in command.params):
            command.params.append(_verbose_option())
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            # One command: its configuration, targets and GC root each ask for the workspace root
            # from the same folders; it is looked for once per folder (a later command looks again).
            with fixed_workspace_roots():
                return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            raise click.exceptions.Exit(130) from None
        except Exception as e:  # noqa: BLE001 - the one place errors become messages
            verbose = bool(ctx.obj and ctx.obj.get("verbose"))
            if verbose:
                traceback.print_exc()
            known = _user_error(e)
            if known is not None:
                raise _UserFacingError(*known) from None
            raise _UserFacingError(
                f"internal error: {type(e).__name__}: {e}",
                None if verbose else "run again with --verbose for the traceback",
                1,
            ) from None


def _verbose_after_the_verb(ctx: click.Context, _param: click.Parameter, verbose: bool) -> None:
    """``marin VERB ... -v``: the same as ``marin -v VERB ...`` (tracebacks, debug logs)."""
    if verbose:
        from marin.cli.common import quiet_library_logs

        ctx.ensure_object(dict)
        ctx.obj["verbose"] = True
        quiet_library_logs(ctx)


def _verbose_option() -> click.Option:
    """``-v/--verbose`` on every verb, so that it works after the verb as well as before it."""
    return click.Option(["-v", "--verbose"], is_flag=True, expose_value=False, is_eager=True,
                        callback=_verbose_after_the_verb, help="Show tracebacks and debug logs.")


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks and debug logs.")
@click.pass_context
def cli(ctx: click.Context, verbose: bool) -> None:
    """marin: content-hashed, cached experiment steps, built Make-style."""
    from marin.cli.common import quiet_library_logs

    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose
    quiet_library_logs(ctx)

