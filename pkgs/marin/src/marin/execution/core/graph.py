"""A step's dependencies (the placeholders in its config) and the graph reachable from targets."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from marin.execution.core.encoding import config_walk
from marin.execution.core.errors import InvalidStep, UnserializableConfig
from marin.execution.core.placeholders import OutputPath, Placeholder
from marin.execution.core.walk import placeholder_step

if TYPE_CHECKING:
    from marin.execution.core.step import Step

__all__ = ['collect_graph', 'dependencies_of']


def _as_step(value: Any, where: str) -> Step:
    # A target is a step or a handle: a placeholder for its whole output, not a path inside one.
    if isinstance(value, Placeholder) and not isinstance(value, OutputPath):
        return placeholder_step(value, where)[0]
    raise UnserializableConfig(f"{where}: expected a Step or a lazy handle, got {type(value).__name__}")


def dependencies_of(step: Step) -> list[Step]:
    """The steps ``step``'s config refers to, in first-seen order, without duplicates (found by the
    walk that also encodes the config for its hash: :func:`~marin.execution.core.encoding.config_walk`)."""
    return config_walk(step).deps


def collect_graph(roots: Iterable[Placeholder]) -> list[Step]:
    """Every step reachable from ``roots``, dependencies before dependents (iterative DFS)."""
    order: list[Step] = []
    state: dict[int, int] = {}  # 1 = on the stack, 2 = finished
    for root in roots:
        root_step = _as_step(root, "target")
        if state.get(id(root_step)) == 2:
            continue
        stack: list[tuple[Step, Iterator[Step]]] = [(root_step, iter(dependencies_of(root_step)))]
        state[id(root_step)] = 1
        while stack:
            step, it = stack[-1]
            advanced = False
            for dep in it:
                s = state.get(id(dep))
                if s == 2:
                    continue
                if s == 1:
                    raise InvalidStep(f"dependency cycle through step {dep.name!r}")
                state[id(dep)] = 1
                stack.append((dep, iter(dependencies_of(dep))))
                advanced = True
                break
            if not advanced:
                stack.pop()
                state[id(step)] = 2
                order.append(step)
    return order
