"""What a config may hold in place of another step's output: a step, a lazy handle, or
``output_path_of(step, "sub/path")``.

:class:`Placeholder` is the one mark the config walker (:mod:`marin.execution.core.walk`)
recognises; :class:`~marin.execution.core.step.Step` and :class:`~marin.execution.core.lazy.Lazy`
are placeholders for their whole output, :class:`OutputPath` for a path inside it. Each says which
step it stands for (:meth:`Placeholder.target`), so the walker, the hash and the resolution of
real paths agree on every kind without knowing the classes above this module.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from marin.execution.core.errors import InvalidStep, UnserializableConfig

if TYPE_CHECKING:
    from marin.execution.core.step import Step

__all__ = ["OutputPath", "Placeholder", "output_path_of"]


class Placeholder(abc.ABC):
    """Stands, in a config, for the output folder of a step (or a path inside it)."""

    @abc.abstractmethod
    def target(self) -> tuple[Step, str]:
        """The step meant (lowered, for a handle) and the sub-path inside its output ("" for all)."""


@dataclass(frozen=True)
class OutputPath(Placeholder):
    """A placeholder in a config for ``<output of step>/<sub_path>``, resolved before ``fn`` runs.

    Attributes:
        step: the step (or lazy handle) whose output is meant.
        sub_path: a relative path inside that output, or ``""`` for the folder itself.
    """

    step: Any
    sub_path: str = ""

    def __post_init__(self) -> None:
        if self.sub_path.startswith("/") or ".." in self.sub_path.split("/"):
            raise InvalidStep(f"output_path_of: sub_path {self.sub_path!r} must be relative and stay inside")

    def target(self) -> tuple[Step, str]:
        if not isinstance(self.step, Placeholder) or isinstance(self.step, OutputPath):
            raise UnserializableConfig(f"output_path_of needs a Step or a lazy handle, got {type(self.step).__name__}")
        return self.step.target()[0], self.sub_path


def output_path_of(step: Any, sub_path: str = "") -> OutputPath:
    """A placeholder for ``sub_path`` inside ``step``'s output folder (a Step or a lazy handle)."""
    return OutputPath(step, sub_path)
