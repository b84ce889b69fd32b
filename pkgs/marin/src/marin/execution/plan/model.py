"""The plan as a value: for every distinct step of a graph, what the run will do and why.

A :class:`Plan` and its :class:`PlannedStep` entries never change once made
(:func:`marin.execution.plan.make.make_plan`); a phase that refines a plan returns a new one
(:func:`~marin.execution.plan.reuse.plan_reuse`, :meth:`Plan.with_estimate`). What changes while a
run goes on lives in the run's state (:class:`marin.execution.run.state.RunState`).
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from marin.execution.core.errors import InvalidStep
from marin.execution.core.sources import SourceKey
from marin.execution.core.step import Step, output_name_of
from marin.execution.core.traits import Start, traits_of
from marin.execution.store.cache import CacheHit
from marin.execution.store.done_index import IndexFixes
from marin.execution.store.listings import FolderListings
from marin.execution.store.provenance_record import Provenance
from marin.execution.store.realisations import Realised
from marin.execution.store.store import StepStore

if TYPE_CHECKING:
    from marin.execution.plan.clashes import NameClash
    from marin.execution.plan.estimate import PlanEstimate
    from marin.execution.store.sources import SourceFingerprint

__all__ = ["Action", "Plan", "PlannedStep", "Reason", "ReasonKind", "SourceNotFound", "StoreView", "UnknownStep",
           "code_changed_note", "reasons_of"]


class UnknownStep(InvalidStep):
    """A ``--only`` or ``--force`` pattern matched no step."""


class SourceNotFound(InvalidStep):
    """A source a step reads matches nothing or cannot be read (refused when the plan is made)."""


class Action(enum.Enum):
    CACHED = "cached"
    FETCH = "fetch"  # built elsewhere: copied from a cache, verified, not rebuilt
    REUSE = "reuse"  # an earlier build over the same input content stands in (store.realisations)
    RUN = "run"
    UNNEEDED = "unneeded"  # not done, but nothing asked for it: a done dependent already covers it


class ReasonKind(enum.Enum):
    NEW = "new"
    CONFIG_CHANGED = "config changed"
    SOURCE_CHANGED = "source changed"
    CODE_CHANGED = "code changed since build"
    UPSTREAM_CHANGED = "upstream changed"
    VERSION_BUMPED = "version bumped"
    FN_CHANGED = "function changed"
    ENV_CHANGED = "environment changed"
    FORCED = "forced"
    EARLIER_FAILED = "earlier attempt failed"
    EARLIER_KILLED = "earlier attempt was killed"
    RESUMING = "resuming"
    IN_CACHE = "in cache"
    REUSE = "reuse"
    STARTS_FROM = "start"  # not a cause: where the build would start (a branch, an extension)
    EXPANDS = "expands"  # not a cause: its output decides more steps, planned once it is built
    NOTE = "note"  # not a cause: what the step's traits say it will do (StepTraits.plan_notes)
    WARNING = "warning"  # not a cause: a risk the step's traits see in it (StepTraits.plan_notes)


@dataclass(frozen=True)
class Reason:
    """Why a step runs: a kind and a one-line detail."""

    kind: ReasonKind
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.detail}" if self.detail else self.kind.value

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.name.lower(), "detail": self.detail}


@dataclass(frozen=True)
class PlannedStep:
    """One step of the plan."""

    step: Step
    hash: str
    output_path: str
    action: Action
    reasons: tuple[Reason, ...] = ()
    deps: tuple[int, ...] = ()
    """Positions in :attr:`Plan.steps` of the steps it reads."""
    env_note: str | None = None
    """Cached, but built in a different environment."""
    cache_hit: CacheHit | None = None
    """Where it is fetched from, when the action is FETCH."""
    realised: Realised | None = None
    """The earlier build that stands in, when the action is REUSE."""
    start: Start | None = None
    """Where its build starts, as planned (:attr:`~marin.execution.core.traits.StepTraits.plan_start`),
    when the action is RUN: the run hands exactly this to the step."""
    sources: tuple[SourceFingerprint, ...] = ()
    """What the sources it reads held when the plan was made, in the order its config holds them."""
    code_changed: tuple[str, ...] = ()
    """Built, but the code of these functions (``module:qualname``) changed since the build while
    the step's ``version`` did not (looked at when the plan checks code: ``marin plan``, or a run
    whose ``code_changes`` is ``rebuild``)."""

    @property
    def name(self) -> str:
        return self.step.name

    @property
    def output_name(self) -> str:
        return output_name_of(self.step.name, self.hash)

    def source_digests(self) -> dict[SourceKey, str]:
        """``{source.key: fingerprint digest}`` of the sources it reads (for its realisation key)."""
        return {(f.spec, f.revision): f.digest for f in self.sources}

    @property
    def forced(self) -> bool:
        """True when the plan rebuilds it whatever is built (``--force``, version ``"dev"``, its code
        changed and the run rebuilds such steps)."""
        return any(r.kind is ReasonKind.FORCED or r.kind is ReasonKind.CODE_CHANGED for r in self.reasons)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.step.name,
            "hash": self.hash,
            "output_path": self.output_path,
            "action": self.action.value,
            "reasons": [r.to_json() for r in self.reasons],
            "env_note": self.env_note,
            "cache": self.cache_hit.cache if self.cache_hit is not None else None,
            "reuse": self.realised.output_path if self.realised is not None else None,
            "start": self.start.to_json() if self.start is not None else None,
            "sources": [f.to_json() | {"files": len(f.files)} for f in self.sources],
            "code_changed": list(self.code_changed),
        }

    def notes(self) -> list[str]:
        """What a cached step's line says besides its action: built elsewhere, code changed."""
        out = [self.env_note] if self.env_note else []
        if self.code_changed and not any(r.kind is ReasonKind.CODE_CHANGED for r in self.reasons):
            out.append(code_changed_note(self.code_changed))
        return out


class StoreView:
    """What planning read of the store, each thing once: folder listings and earlier builds.

    A plan keeps it so that later phases, the estimate and the run ask the store nothing twice.
    """

    def __init__(self, store: StepStore):
        self.store = store
        self.listings = FolderListings()
        self._earlier: dict[str, list[tuple[str, Provenance]]] = {}
        self._index_fixes = IndexFixes()

    def found_out_of_date(self, fixes: IndexFixes) -> None:
        """Keep what reading the done index found out of date: a plan never writes, a run puts it right."""
        self._index_fixes.add(fixes)

    def take_index_fixes(self) -> IndexFixes:
        """What the done index lacks or has wrong, found since the last call (then forgotten)."""
        fixes, self._index_fixes = self._index_fixes, IndexFixes()
        return fixes

    def earlier_builds(self, name: str) -> list[tuple[str, Provenance]]:
        """Finished builds of the step ``name`` (any hash): (output path, provenance), newest
        first (:meth:`StepStore.earlier_builds`, read once per name)."""
        if name not in self._earlier:
            listing = self.listings.names(self.store.parent_folder(name))
            self._earlier[name] = self.store.earlier_builds(name, listing)
        return self._earlier[name]


@dataclass(frozen=True)
class Plan:
    """Every distinct step (by hash) reachable from the targets, dependencies first."""

    store: StepStore
    steps: tuple[PlannedStep, ...]
    pos_of: Mapping[int, int]
    """``id(step object)`` → its position in :attr:`steps` (several objects may share one hash)."""
    view: StoreView = field(repr=False, compare=False)
    """The store as planning read it."""
    salt: str | None = None
    """The environment digest in every hash (``--strict-env``)."""
    estimate: PlanEstimate | None = None
    """Durations and accelerator-hours of the steps that would run (:meth:`with_estimate`)."""
    expansions: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    """Expanding steps found built (:mod:`marin.execution.plan.expansion`): position → positions of
    the steps their output expanded into."""
    name_clashes: tuple[NameClash, ...] = ()
    """Names that several of :attr:`steps` carry (:mod:`marin.execution.plan.clashes`)."""

    def unexpanded(self) -> list[int]:
        """Positions of expanding steps whose expansion is not known yet (they are to be built)."""
        return [pos for pos, p in enumerate(self.steps) if pos not in self.expansions
                and p.action is not Action.UNNEEDED and traits_of(p.step.fn).expand is not None]

    @property
    def listings(self) -> FolderListings:
        return self.view.listings

    def earlier_builds(self, name: str) -> list[tuple[str, Provenance]]:
        """Finished builds of the step ``name``, newest first (see :class:`StoreView`)."""
        return self.view.earlier_builds(name)

    def paths(self) -> dict[int, str]:
        """``{id(step): output path}`` for every step object of the graph (for placeholders)."""
        return {key: self.steps[pos].output_path for key, pos in self.pos_of.items()}

    def hashes(self) -> dict[int, str]:
        """``{id(step): hash}`` for every step object of the graph."""
        return {key: self.steps[pos].hash for key, pos in self.pos_of.items()}

    def position(self, step: Step) -> int:
        """The position of ``step`` (a step object of the graph) in :attr:`steps`."""
        return self.pos_of[id(step)]

    def to_run(self) -> list[PlannedStep]:
        """Steps that must be built here (not cached, not in a cache)."""
        return [p for p in self.steps if p.action is Action.RUN]

    def to_do(self) -> list[PlannedStep]:
        """Steps the run must act on: build, fetch or reuse."""
        return [p for p in self.steps if p.action in (Action.RUN, Action.FETCH, Action.REUSE)]

    def with_steps(self, changed: Mapping[int, PlannedStep]) -> Plan:
        """This plan with the entries at the given positions replaced."""
        steps = tuple(changed.get(pos, p) for pos, p in enumerate(self.steps))
        return dataclasses.replace(self, steps=steps)

    def with_estimate(self, estimate: PlanEstimate) -> Plan:
        return dataclasses.replace(self, estimate=estimate)

    def to_json(self) -> dict[str, Any]:
        return {
            "prefix": self.store.prefix,
            "steps": [p.to_json() for p in self.steps],
            "summary": {a.value: sum(1 for p in self.steps if p.action is a) for a in Action},
            "estimate": self.estimate.to_json() if self.estimate is not None else None,
            "expansions": {self.steps[k].name: [self.steps[v].name for v in vs] for k, vs in self.expansions.items()},
            "expands_after": [self.steps[pos].name for pos in self.unexpanded()],
            "name_clashes": [c.to_json() for c in self.name_clashes],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)


def code_changed_note(functions: Sequence[str], limit: int = 3) -> str:
    """``code changed since build: <module:function>, ...`` (at most ``limit`` named)."""
    shown = ", ".join(functions[:limit]) + (f" and {len(functions) - limit} more" if len(functions) > limit else "")
    return f"{ReasonKind.CODE_CHANGED.value}: {shown}"


def reasons_of(reasons: Sequence[Reason]) -> list[str]:
    """Reasons as the lines an outcome, a log or a report shows."""
    return [str(r) for r in reasons]
