"""The reuse phase: steps that would run, satisfied by an earlier build over the same input content.

See :mod:`marin.execution.store.realisations` for the realisation key and records.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from marin.execution.core.graph import dependencies_of
from marin.execution.core.hashing import realisation_key
from marin.execution.plan.model import Action, Plan, PlannedStep, Reason, ReasonKind
from marin.execution.store.realisations import digest_of_build, find_realisation, inputs_of

__all__ = ["DigestAt", "inputs_in_plan", "plan_reuse"]

DigestAt = Callable[[int], "str | None"]
"""The output digest of the step at a plan position, when it is known (built)."""


def inputs_in_plan(plan: Plan, planned: PlannedStep,
                   digest_at: DigestAt) -> tuple[dict[int, str], list[dict[str, Any]]] | None:
    """The realisation inputs of ``planned`` (see :func:`~marin.execution.store.realisations.inputs_of`),
    with each input's digest from ``digest_at``; None while one is not known."""
    outputs = {}
    for dep in dependencies_of(planned.step):
        pos = plan.position(dep)
        q = plan.steps[pos]
        outputs[id(dep)] = (q.name, q.hash, digest_at(pos))
    return inputs_of(planned.step, outputs)


def plan_reuse(plan: Plan, places: Sequence[str]) -> Plan:
    """The plan with each step that would run turned into a reuse where an earlier build of the same
    step over the same input content exists (in ``places``: the prefix, then caches): action
    ``REUSE`` and a reason naming the inputs rebuilt with identical output. Forced steps run."""
    known: dict[int, str | None] = {}

    def digest_at(pos: int) -> str | None:
        if pos not in known:
            q = plan.steps[pos]
            known[pos] = digest_of_build(q.output_path, q.step) if q.action is Action.CACHED else None
        return known[pos]

    changed: dict[int, PlannedStep] = {}
    for pos, p in enumerate(plan.steps):
        if p.action is not Action.RUN or not p.deps or p.forced:
            continue
        inputs = inputs_in_plan(plan, p, digest_at)
        if inputs is None:
            continue
        key = realisation_key(p.step, inputs[0], plan.salt, p.source_digests())
        found = find_realisation(p.name, key, places, exclude=p.output_name)
        if found is None:
            continue
        changed[pos] = dataclasses.replace(p, action=Action.REUSE, realised=found,
                                           reasons=(Reason(ReasonKind.REUSE, found.reason(inputs[1])),))
        known[pos] = found.output_digest
    return plan.with_steps(changed) if changed else plan
