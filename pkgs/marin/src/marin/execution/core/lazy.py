"""Lazy handles: typed recipes for steps, lowered to :class:`Step` only when a graph is run.

Building a handle never runs anything and never touches storage. Most handles are one step
function under a name (:class:`StepHandle`); Marin's ``ArtifactStep`` and ``ExecutorStep``
(:mod:`marin.execution.compat`) build their configs first.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from marin.execution.core.errors import InvalidStep
from marin.execution.core.placeholders import Placeholder
from marin.execution.core.sites import keep_site, record_site
from marin.execution.core.step import Step

__all__ = ["Lazy", "StepHandle", "lower", "lower_targets"]


class Lazy(Placeholder):
    """Base of step recipes (``tokenized(...)``, ``train_lm(...)``, Marin's ``ArtifactStep``).

    Subclasses implement :meth:`_build`; :meth:`lower` memoises it so a handle used by several
    steps lowers to one :class:`Step`, said to be defined where the handle was made.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # Where the handle is made, whatever its subclass's __init__ (never hashed: sites.py).
        handle = super().__new__(cls)
        record_site(handle)
        return handle

    @abc.abstractmethod
    def _build(self) -> Step:
        """Construct the step this handle describes."""

    def companions(self) -> Sequence[Lazy]:
        """Handles built whenever this one is a target (a model's evaluations); none by default."""
        return ()

    def lower(self) -> Step:
        cached = self.__dict__.get("_lowered")
        if cached is None:
            cached = self._build()
            if not isinstance(cached, Step):
                raise InvalidStep(f"{type(self).__name__}._build must return a Step, got {type(cached).__name__}")
            keep_site(cached, self)
            object.__setattr__(self, "_lowered", cached)
        return cached

    def target(self) -> tuple[Step, str]:
        return self.lower(), ""


@dataclass(frozen=True, eq=False)
class StepHandle(Lazy):
    """A handle to ``fn(config, output_path)`` under ``name``: a subclass names its step function
    once, ``class Tokenized(StepHandle, fn=tokenize_step)``, and adds what it offers on top.

    Attributes:
        name: the step's name; its output lives at ``<prefix>/<name>-<hash>``.
        config: the step's config (hashed).
        version: as for every step; ``"dev"`` rebuilds on every run.
        resources: what the step needs to run (an iris ``ResourceConfig``; never hashed).
        ttl: how long its output is worth keeping (:attr:`Step.ttl`; never hashed).
    """

    name: str
    config: Any
    version: str = "v1"
    resources: Any = None
    ttl: float | str | None = None
    step_fn: ClassVar[Callable[[Any, str], Any]]

    def __init_subclass__(cls, fn: Callable[[Any, str], Any] | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if fn is not None:
            # staticmethod: the step function is the class's, never bound to a handle.
            cls.step_fn = staticmethod(fn)  # type: ignore[assignment]

    def _build(self) -> Step:
        fn = getattr(type(self), "step_fn", None)
        if fn is None:
            raise InvalidStep(f"{type(self).__name__} names no step function (class ...(StepHandle, fn=...))")
        return Step(name=self.name, fn=fn, config=self.config, version=self.version, resources=self.resources,
                    ttl=self.ttl)

    def with_ttl(self, ttl: float | str | None) -> Self:
        """This handle with its output kept for ``ttl`` (:attr:`Step.ttl`): ``tokenized(...).with_ttl("7d")``."""
        copy = dataclasses.replace(self, ttl=ttl)
        keep_site(copy, self)  # the same step, defined where the handle was
        return copy


def lower(item: Any) -> Step:
    """Turn a lazy handle (or a step) into its :class:`Step`."""
    if isinstance(item, Step):
        return item
    if isinstance(item, Lazy):
        return item.lower()
    raise InvalidStep(f"expected a Step or a lazy handle, got {type(item).__name__}: {item!r}")


def lower_targets(items: Iterable[Any]) -> list[Step]:
    """The steps of ``items`` (handles or steps), each followed by the steps of its companions."""
    out: list[Step] = []
    for item in items:
        out.append(lower(item))
        if isinstance(item, Lazy):
            out.extend(lower(c) for c in item.companions())
    return out
