"""Marin's executor API (``ExecutorStep``, ``this_output_path``, ``versioned``, ``executor_main``)
over this project's steps.

An :class:`ExecutorStep` is a lazy handle: it lowers to a :class:`~marin.execution.step.Step`
whose function calls ``fn(config)`` with the config's placeholders resolved. Semantics are this
project's, not Marin's:

- every config field is hashed, not only the ``versioned`` ones; ``versioned(x)`` hashes
  exactly as ``x`` does;
- a step's output folder is ``<prefix>/<name>-<hash>``; ``override_output_path`` is refused;
- failures: :func:`executor_main` raises an error naming the failed steps after the run, and a
  step that failed in an earlier run is reported, not retried, unless ``--force_run_failed``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import draccus

from marin.execution.compat.tokens import OUTPUT_TOKEN, PREFIX_TOKEN, dep_token
from marin.execution.core.errors import InvalidStep
from marin.execution.core.graph import collect_graph, dependencies_of
from marin.execution.core.identity import keep_identity
from marin.execution.core.lazy import Lazy, lower
from marin.execution.core.placeholders import OutputPath
from marin.execution.core.step import Step
from marin.execution.core.traits import StepTraits, step_function
from marin.execution.core.walk import Kind, kind_of, map_children, map_nodes
from marin.execution.plan.model import Action, ReasonKind
from marin.execution.run import capture
from marin.execution.run.runner import StepRunner
from marin.execution.run.worker import current_step
from rigging import filesystem as fs
from rigging.environ import updated_environ

__all__ = [
    "THIS_OUTPUT_PATH",
    "ExecutorMainConfig",
    "ExecutorStep",
    "ExecutorStepFailed",
    "InputName",
    "OutputName",
    "VersionedValue",
    "ensure_versioned",
    "executor_main",
    "output_path_of",
    "this_output_path",
    "unwrap_versioned_value",
    "versioned",
]

log = logging.getLogger("marin.executor")

_IDENTITY = "marin.execution.executor"
"""Where this adapter was first defined: the hashes of existing ExecutorSteps name its function and
config classes by that module (:func:`~marin.execution.core.identity.keep_identity`), which
re-exports them."""

ConfigT = TypeVar("ConfigT")
T = TypeVar("T")


class ExecutorStepFailed(RuntimeError):
    """Steps failed (now, or in an earlier run and not retried); the message names them."""


@keep_identity(_IDENTITY)
@dataclass(frozen=True)
class OutputName:
    """In a config: this step's own output folder, joined with ``name`` (Marin's ``this_output_path``)."""

    name: str | None = None


def this_output_path(name: str | None = None) -> OutputName:
    """A placeholder for the step's own output folder (or ``name`` inside it)."""
    return OutputName(name=name or None)


THIS_OUTPUT_PATH = OutputName(None)


@dataclass(frozen=True)
class VersionedValue(Generic[T]):
    """Marin's marker for "this value is part of the version". Here every value is: it hashes as ``value``."""

    value: T


def versioned(value: T) -> VersionedValue[T]:
    """Mark ``value`` as versioned; it hashes exactly as ``value`` itself (every field is hashed here)."""
    if isinstance(value, VersionedValue):
        raise ValueError(f"versioned(): {value!r} is already versioned")
    if isinstance(value, InputName):
        raise ValueError("versioned(): an InputName cannot be versioned (its step's hash is already part of the key)")
    return VersionedValue(value)


def ensure_versioned(value: Any) -> VersionedValue[Any]:
    """``value`` wrapped in :class:`VersionedValue` unless it already is."""
    return value if isinstance(value, VersionedValue) else VersionedValue(value)


def unwrap_versioned_value(value: Any) -> Any:
    """The value inside a :class:`VersionedValue`, or ``value`` itself."""
    return value.value if isinstance(value, VersionedValue) else value


@dataclass(frozen=True)
class InputName:
    """In a config: another step's output folder joined with ``name`` (Marin's ``output_path_of``).

    ``step=None`` (``InputName.hardcoded(path)``) is ``path`` under the prefix.
    """

    step: Any
    name: str | None = None
    block_on_step: bool = True

    def cd(self, name: str) -> InputName:
        return InputName(self.step, name=f"{self.name.rstrip('/')}/{name}" if self.name else name,
                         block_on_step=self.block_on_step)

    def __truediv__(self, other: str) -> InputName:
        return self.cd(other)

    @staticmethod
    def hardcoded(path: str) -> InputName:
        """``path`` relative to the prefix, outside the graph."""
        return InputName(None, name=path)

    def nonblocking(self) -> InputName:
        """Marin's pseudo-dependency; refused when the step is lowered (every input here is built first)."""
        return dataclasses.replace(self, block_on_step=False)


def output_path_of(step: Any, name: str | None = None) -> InputName:
    """A placeholder for ``name`` inside ``step``'s output folder (an ExecutorStep, Step or handle)."""
    return InputName(step=step, name=name)


@keep_identity(_IDENTITY)
@dataclass(frozen=True)
class _PrefixPath:
    """``InputName.hardcoded(path)`` once lowered: ``path`` under the prefix, resolved when the step runs."""

    path: str


@keep_identity(_IDENTITY)
@dataclass(frozen=True)
class ExecutorCall:
    """The config of a lowered :class:`ExecutorStep`: Marin's ``fn`` and its config (both hashed)."""

    fn: Callable[[Any], Any]
    """The user's ``fn(config)``; hashed by its module and qualified name."""
    config: Any
    """The user's config, with ``versioned`` values unwrapped and placeholders in this project's form."""
    step_name: str
    """The step's name (for messages; part of the hash of every ExecutorStep, so it stays)."""
    env_vars: tuple[tuple[str, str], ...] = ()
    """Environment variables set while ``fn`` runs."""
    deps: tuple[OutputPath, ...] = ()
    """Dependencies named in the config by placeholder text (``ArtifactStep``'s ``ctx.artifact_path``)."""


def check_module_level(step_name: str, what: str, fn: Any) -> None:
    """Raise :class:`InvalidStep` unless ``fn`` is a module-level function (workers import it by name)."""
    qualname = getattr(fn, "__qualname__", "")
    if not callable(fn) or not qualname or "<lambda>" in qualname or "<locals>" in qualname:
        raise InvalidStep(f"step {step_name!r}: {what} must be a module-level function taking the config, got {fn!r}")


def _to_project_form(value: Any, where: str) -> Any:
    """Marin's placeholders as this project's: versioned values unwrapped, inputs as ``OutputPath``."""
    if isinstance(value, VersionedValue):
        return map_nodes(value.value, lambda v: _to_project_form(v, where))
    if kind_of(value) is Kind.PLACEHOLDER and dataclasses.is_dataclass(value):
        # A step held by value (or an OutputPath of one) is converted too, into a copy at each place
        # it stands, as this adapter always has: each copy counts as a dependency in the hashes of
        # existing files, so this stays.
        return map_children(value, Kind.DATACLASS, lambda v: map_nodes(v, lambda w: _to_project_form(w, where)))
    if isinstance(value, InputName):
        if not value.block_on_step:
            raise InvalidStep(f"{where}: InputName.nonblocking() is not supported: every input is built before "
                              "the step that reads it (drop .nonblocking())")
        if value.step is None:
            return _PrefixPath(value.name or "")
        if not isinstance(value.step, Step | Lazy):
            raise InvalidStep(f"{where}: output_path_of needs a step, got {type(value.step).__name__}")
        return OutputPath(value.step, (value.name or "").strip("/"))
    return value


def _resolve_own_paths(value: Any, output_path: str, prefix: str, deps: Sequence[OutputPath | str] = ()) -> Any:
    def convert(v: Any) -> Any:
        if isinstance(v, OutputName):
            return fs.join(output_path, v.name) if v.name else output_path
        if isinstance(v, _PrefixPath):
            return fs.join(prefix, v.path) if v.path else prefix
        if isinstance(v, str) and "\x00marin:" in v:
            v = v.replace(OUTPUT_TOKEN, output_path).replace(PREFIX_TOKEN, prefix)
            for i, path in enumerate(deps):
                v = v.replace(dep_token(i), str(path))
        return v

    return map_nodes(value, convert)


@keep_identity(_IDENTITY)
def run_executor_step(call: ExecutorCall, output_path: str) -> None:
    """Step function of every lowered :class:`ExecutorStep`: ``call.fn(config)`` with its own paths filled in."""
    running = current_step()
    if running is None:
        raise RuntimeError(f"{call.step_name}: an ExecutorStep's function runs inside a runner (marin run, "
                           "executor_main), which hands it the prefix")
    config = _resolve_own_paths(call.config, output_path.rstrip("/"), running.prefix, call.deps)
    with updated_environ(dict(call.env_vars)):
        call.fn(config)


# Marin's executor runs two steps of one name (a warning here). Not a decorator: its line would enter
# the code digest every ExecutorStep build recorded. Workers and pickle find the wrapper by name.
run_executor_step = step_function(StepTraits(shares_names=True))(run_executor_step)  # type: ignore[assignment]


@dataclass(frozen=True, eq=False)
class ExecutorStep(Lazy, Generic[ConfigT]):
    """Marin's step: ``fn(config)`` where ``config`` may hold ``this_output_path()``,
    ``output_path_of(step)``, other steps and ``versioned(...)`` values.

    Attributes:
        name: the step's name; its output folder is ``<prefix>/<name>-<hash>``.
        fn: a module-level function taking only the config.
        config: a dataclass (or JSON-like data); every field is hashed.
        description: shown nowhere in the hash.
        override_output_path: not supported (refused when lowered): outputs live at ``<name>-<hash>``.
        pip_dependency_groups: accepted for Marin's files; the environment here is the lockfile.
        resources: a ``ResourceConfig`` saying what the step needs (never hashed).
        env_vars: environment variables set while ``fn`` runs (hashed: they may change the result).
    """

    name: str
    fn: Callable[[Any], Any]
    config: ConfigT = None  # type: ignore[assignment]
    description: str | None = None
    override_output_path: str | None = None
    pip_dependency_groups: Sequence[str] | None = None
    resources: Any = None
    env_vars: Mapping[str, str] | None = None

    def cd(self, name: str) -> InputName:
        """``name`` inside this step's output folder."""
        return InputName(self, name=name)

    def __truediv__(self, other: str) -> InputName:
        return self.cd(other)

    def as_input_name(self) -> InputName:
        return InputName(self, name=None)

    def with_output_path(self, output_path: str) -> ExecutorStep[ConfigT]:
        return dataclasses.replace(self, override_output_path=output_path)

    def _build(self) -> Step:
        if self.override_output_path is not None:
            raise InvalidStep(
                f"step {self.name!r}: override_output_path={self.override_output_path!r} is not supported: outputs "
                "live at <prefix>/<name>-<hash>, so that a changed config never overwrites another build")
        check_module_level(self.name, "fn", self.fn)
        where = f"{self.name}.config"
        config = map_nodes(self.config, lambda v: _to_project_form(v, where))
        env = tuple(sorted((str(k), str(v)) for k, v in (self.env_vars or {}).items()))
        return Step(name=self.name, fn=run_executor_step,
                    config=ExecutorCall(fn=self.fn, config=config, step_name=self.name, env_vars=env),
                    resources=self.resources)


@dataclass(frozen=True)
class ExecutorMainConfig:
    """Marin's ``executor_main`` command-line flags, parsed as Marin parses them (draccus):
    ``--dry_run true``, ``--force_run_failed False``, ``--run_only '[^b$, tokenize]'`` (a YAML
    flow list), ``--prefix P``, ``--max_concurrent N``."""

    prefix: str | None = None
    """Where outputs live (default: this project's configuration, e.g. ``MARIN_PREFIX``)."""
    dry_run: bool = False
    """Print what would run; run nothing."""
    force_run_failed: bool = False
    """Retry steps that failed in an earlier run (otherwise they are reported, not retried)."""
    run_only: list[str] | None = None
    """Regular expressions: run only steps whose names match (``re.search``), with their dependencies."""
    max_concurrent: int | None = None
    """Steps run at once (default: the configuration's ``max_parallel``)."""


def parse_executor_args(argv: Sequence[str]) -> ExecutorMainConfig:
    """Marin's flags, read by draccus as Marin's ``executor_main`` reads them.

    Raises:
        SystemExit: an unknown or malformed flag; the message names it (exit code 2).
    """
    try:
        return draccus.parse(config_class=ExecutorMainConfig, args=list(argv))
    except (draccus.utils.DecodingError, draccus.utils.ParsingError) as e:
        prog = os.path.basename(sys.argv[0]) if sys.argv else "experiment"
        print(f"{prog}: error: " + " ".join(str(e).split()), file=sys.stderr)
        raise SystemExit(2) from None


def _select(steps: list[Step], patterns: Sequence[str]) -> list[Step]:
    try:
        compiled = [re.compile(p) for p in patterns]
    except re.error as e:
        raise InvalidStep(f"--run_only: {e.pattern!r} is not a regular expression ({e})") from None
    chosen = [s for s in collect_graph(steps) if any(c.search(s.name) for c in compiled)]
    if not chosen:
        raise InvalidStep(f"--run_only {list(patterns)!r} matches no step")
    return chosen


def executor_main(config: ExecutorMainConfig | Sequence[Any] | None = None, steps: Sequence[Any] | None = None,
                  description: str | None = None, max_concurrent: int | None = None) -> Any:
    """Run ``steps`` (and what they read) as Marin's ``executor_main`` does, on this project's runner.

    Flags come from ``config`` or, when it is None, from the command line (see
    :func:`parse_executor_args`). Under ``marin run FILE`` / ``marin plan FILE`` the steps are
    handed to the command instead of run.

    Returns:
        the :class:`~marin.execution.step_runner.RunResult` (None when every step was held back
        by an earlier failure, which then raises).

    Raises:
        ExecutorStepFailed: steps failed, or failed in an earlier run and were not retried; the
            message names them (after everything else that could run has run).
    """
    if steps is None and config is not None and not isinstance(config, ExecutorMainConfig):
        config, steps = None, config
    if steps is None:
        raise TypeError("executor_main() needs steps=[...]")
    capture.offer(list(steps))
    if config is None:
        config = parse_executor_args(sys.argv[1:])
    elif not isinstance(config, ExecutorMainConfig):
        raise TypeError(f"executor_main(config=...) must be an ExecutorMainConfig, got {type(config).__name__}")
    lowered = [lower(s) for s in steps]
    if config.run_only:
        lowered = _select(lowered, config.run_only)
    if description:
        log.info("%s", description)
    # Marin's executor keeps a step whose code changed under the same version: so does its adapter,
    # whatever the configuration says (`marin plan` still names the change).
    runner = StepRunner(prefix=config.prefix, max_parallel=config.max_concurrent or max_concurrent,
                        dry_run=config.dry_run, code_changes="warn")
    try:
        skipped: list[str] = []
        if not config.force_run_failed:
            lowered, skipped = _without_earlier_failures(runner, lowered)
        result = runner.run(lowered) if lowered else None
    finally:
        runner.close()
    for outcome in result.steps if result is not None else ():
        reasons = f" ({'; '.join(outcome.reasons)})" if outcome.reasons else ""
        print(f"{outcome.outcome.value:10s} {outcome.name} -> {outcome.output_path}{reasons}")
    problems = [f"{s.name} failed: {(s.error or '').strip().splitlines()[-1] if s.error else 'no error text'}"
                for s in (result.failed if result is not None else ())]
    problems += [f"{name} failed in an earlier run and was not retried (pass --force_run_failed true)"
                 for name in skipped]
    if problems:
        raise ExecutorStepFailed(f"{len(problems)} step(s) did not finish: " + "; ".join(problems))
    return result


def _without_earlier_failures(runner: Any, steps: list[Step]) -> tuple[list[Step], list[str]]:
    """The steps that do not depend on a step that failed in an earlier run, and those failed steps' names."""
    plan = runner.plan(steps, explain=True)
    failed = {id(p.step) for p in plan.steps if p.action is Action.RUN
              and any(r.kind is ReasonKind.EARLIER_FAILED for r in p.reasons)}
    if not failed:
        return steps, []
    blocked: set[int] = set()
    names = []
    for s in collect_graph(steps):
        if id(s) in failed or any(id(d) in blocked for d in dependencies_of(s)):
            blocked.add(id(s))
            if id(s) in failed:
                names.append(s.name)
    keep = [s for s in collect_graph(steps) if id(s) not in blocked]
    return keep, names
