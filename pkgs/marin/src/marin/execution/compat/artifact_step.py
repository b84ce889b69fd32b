"""Marin's ``ArtifactStep(name, version, artifact_type, run, build_config, deps)`` over this project's steps.

``build_config(ctx)`` is called once, when the handle is lowered, with a :class:`StepContext`
whose paths are placeholders (``ctx.output_path``, ``ctx.prefix``, ``ctx.artifact_path(dep)``).
They are strings, so a config may join them with other text; they are replaced by the real paths
in every string of the config just before ``run(config)`` runs. The config, ``run``'s identity,
the version and the dependencies' hashes make the step's hash.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from marin.execution.compat.executor import ExecutorCall, check_module_level, run_executor_step
from marin.execution.compat.tokens import OUTPUT_TOKEN, PREFIX_TOKEN, dep_token
from marin.execution.core.errors import InvalidStep
from marin.execution.core.lazy import Lazy
from marin.execution.core.placeholders import OutputPath
from marin.execution.core.step import Step

__all__ = ["ArtifactStep", "StepContext"]

T = TypeVar("T")

class StepContext:
    """What ``build_config`` may ask for: this step's output folder, the prefix, a dependency's output."""

    def __init__(self, name: str, deps: tuple[Any, ...]):
        self._name = name
        self._deps: list[Any] = list(deps)

    @property
    def output_path(self) -> str:
        return OUTPUT_TOKEN

    @property
    def prefix(self) -> str:
        return PREFIX_TOKEN

    def artifact_path(self, dep: Any) -> str:
        """The output folder of ``dep`` (a handle or step), which is built first."""
        if not isinstance(dep, Lazy | Step):
            raise InvalidStep(f"step {self._name!r}: ctx.artifact_path needs a step or handle, got {type(dep).__name__}")
        for i, known in enumerate(self._deps):
            if known is dep:
                return dep_token(i)
        self._deps.append(dep)
        return dep_token(len(self._deps) - 1)

    def runtime_arg(self, key: str) -> Any:
        raise InvalidStep(f"step {self._name!r}: ctx.runtime_arg({key!r}) is not supported: every value a step "
                          "reads is part of its config (and its hash)")

    @property
    def deps(self) -> tuple[Any, ...]:
        return tuple(self._deps)


@dataclass(frozen=True, eq=False)
class ArtifactStep(Lazy, Generic[T]):
    """Marin's lazy artifact handle: ``run(build_config(ctx))`` builds it (see the module docstring).

    Attributes:
        name: the step's name; its output folder is ``<prefix>/<name>-<hash>``.
        version: as for every step; ``"dev"`` rebuilds on every run.
        artifact_type: what the output holds (for annotations).
        run: a module-level function taking the config.
        build_config: called once, at lowering, with a :class:`StepContext`.
        deps: handles built first (also those read through ``ctx.artifact_path``).
        runtime_args: not supported (refused when lowered unless empty).
    """

    name: str
    version: str
    artifact_type: Any
    run: Callable[[Any], Any]
    build_config: Callable[[StepContext], Any]
    deps: tuple[Any, ...] = ()
    runtime_args: Mapping[str, Any] = field(default_factory=dict)

    def _build(self) -> Step:
        check_module_level(self.name, "run", self.run)
        if self.runtime_args:
            raise InvalidStep(f"step {self.name!r}: runtime_args={dict(self.runtime_args)!r} are not supported: "
                              "every value a step reads is part of its config (and its hash)")
        ctx = StepContext(self.name, tuple(self.deps))
        config = self.build_config(ctx)
        deps = tuple(OutputPath(d) for d in ctx.deps)
        return Step(name=self.name, fn=run_executor_step, version=self.version,
                    config=ExecutorCall(fn=self.run, config=config, step_name=self.name, deps=deps))
