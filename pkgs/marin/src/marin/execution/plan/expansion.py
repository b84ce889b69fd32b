"""Steps whose outputs decide the next steps: expanding a built step, and growing a plan with
what it expanded into.

A step function whose :class:`~marin.execution.core.traits.StepTraits` has ``expand`` is an
*expanding* step: once it is built, ``expand(step, output_path)`` (a pure function of its output)
returns more steps, which are planned and run in the same run, as Snakemake re-evaluates its graph
after a checkpoint rule. The expanded steps are ordinary steps: their identities are content
hashes, the same whoever expands them. Steps that read an expanding step wait until everything
it expanded into (and what those expanded into) is built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from marin.execution.core.errors import InvalidStep
from marin.execution.core.lazy import Lazy, lower_targets
from marin.execution.core.step import Step
from marin.execution.core.traits import traits_of
from marin.execution.plan.model import Action, Plan

__all__ = ["ExpansionFailed", "closure", "expands", "expansion_of", "merge_plans"]


class ExpansionFailed(InvalidStep):
    """An expanding step's ``expand`` raised or returned something that is not a list of steps."""


def expands(step: Step) -> bool:
    """True when ``step``'s output decides more steps."""
    return traits_of(step.fn).expand is not None


def expansion_of(step: Step, output_path: str) -> list[Step]:
    """The steps the built ``step`` (at ``output_path``) expands into, lowered, companions included.

    Raises:
        ExpansionFailed: naming the step, when its ``expand`` raises or returns no list of steps.
    """
    expander = traits_of(step.fn).expand
    if expander is None:
        return []
    try:
        items = expander(step, output_path)
    except Exception as e:  # noqa: BLE001 - reported as the step's error, with the original as cause
        raise ExpansionFailed(f"{step.name}: expanding its output {output_path} failed: "
                              f"{type(e).__name__}: {e}") from e
    if not isinstance(items, list | tuple) or not all(isinstance(i, Step | Lazy) for i in items):
        raise ExpansionFailed(f"{step.name}: expand must return a list of steps or handles, got {items!r}")
    return lower_targets(items)


def closure(expansions: Mapping[int, Sequence[int]], pos: int) -> set[int]:
    """Every position an expanding step at ``pos`` expanded into, following expansions of those too
    (only as far as they are known)."""
    seen: set[int] = set()
    stack = list(expansions.get(pos, ()))
    while stack:
        q = stack.pop()
        if q not in seen:
            seen.add(q)
            stack.extend(expansions.get(q, ()))
    return seen


def merge_plans(base: Plan, extra: Plan) -> tuple[Plan, dict[int, int]]:
    """``base`` grown by the entries of ``extra`` it does not hold (by hash), positions of ``base``
    kept; an entry ``base`` found unneeded and ``extra`` needs takes ``extra``'s entry.

    Returns:
        (the merged plan, ``extra``'s positions → merged positions).
    """
    by_hash = {p.hash: i for i, p in enumerate(base.steps)}
    steps = list(base.steps)
    mapping: dict[int, int] = {}
    for j, q in enumerate(extra.steps):
        i = by_hash.get(q.hash)
        replace = i is None or (steps[i].action is Action.UNNEEDED and q.action is not Action.UNNEEDED)
        if i is None:
            i = len(steps)
            steps.append(q)
            by_hash[q.hash] = i
        mapping[j] = i
        if replace:
            steps[i] = dataclasses.replace(q, deps=tuple(mapping[d] for d in q.deps))
    pos_of = dict(base.pos_of)
    for key, j in extra.pos_of.items():
        pos_of.setdefault(key, mapping[j])
    expansions = dict(base.expansions)
    for k, roots in extra.expansions.items():
        expansions.setdefault(mapping[k], tuple(mapping[r] for r in roots))
    merged = dataclasses.replace(base, steps=tuple(steps), pos_of=pos_of, expansions=expansions)
    return merged, mapping
