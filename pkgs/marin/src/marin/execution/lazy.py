"""Lazy handles: typed recipes for steps, lowered to :class:`Step` only when a graph is run.

Building a handle never runs anything and never touches storage.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from marin.execution.step import InvalidStep, Step

if TYPE_CHECKING:
    from marin.execution.artifact_step import ArtifactStep, StepContext

__all__ = ["ArtifactStep", "Lazy", "StepContext", "lower", "lower_targets"]  # the first and third load on use (__getattr__)

T = TypeVar("T")


class Lazy(abc.ABC, Generic[T]):
    """Base of typed step recipes (``tokenized(...)``, ``train_lm(...)``).

    ``Lazy[X]`` says what the step's output holds. Marin's handle class, ``ArtifactStep``, is one
    (:mod:`marin.execution.artifact_step`).

    Subclasses implement :meth:`_build`; :meth:`lower` memoises it so a handle used by several
    steps lowers to one :class:`Step`.
    """

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
            object.__setattr__(self, "_lowered", cached)
        return cached


def __getattr__(name: str) -> Any:
    # Marin's handle class lives beside the executor adapter it lowers through.
    if name in ("ArtifactStep", "StepContext"):
        from marin.execution import artifact_step

        return getattr(artifact_step, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
