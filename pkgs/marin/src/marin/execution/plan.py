"""The plan: for every step of a graph, cached or the reason it would run."""

from __future__ import annotations

import enum
import fnmatch
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from marin.execution.hashing import (
    collect_graph,
    dependencies_of,
    describe_encoded,
    flatten_config,
    fn_identity,
    hash_graph,
    holds_dependency,
)
from marin.execution.lazy import Lazy, lower_targets
from marin.execution.step import InvalidStep, Step
from marin.execution.store import BuildState, FolderListings, StepRecord, StepStore, parent_folder

if TYPE_CHECKING:
    from marin.execution.cache import CacheHit
    from marin.execution.realise import Realised

__all__ = [
    "DEV_VERSION", "Action", "Plan", "PlannedStep", "Reason", "ReasonKind", "UnknownStep", "make_plan", "select",
]


DEV_VERSION = "dev"
"""A step with this version rebuilds on every run (Marin's meaning): for iterating on code."""


class UnknownStep(InvalidStep):
    """A ``--only`` or ``--force`` pattern matched no step."""


class Action(enum.Enum):
    CACHED = "cached"
    FETCH = "fetch"  # built elsewhere: copied from a cache, verified, not rebuilt
    REUSE = "reuse"  # an earlier build over the same input content stands in (marin.execution.realise)
    RUN = "run"
    UNNEEDED = "unneeded"  # not done, but nothing asked for it: a done dependent already covers it


class ReasonKind(enum.Enum):
    NEW = "new"
    CONFIG_CHANGED = "config changed"
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


@dataclass(frozen=True)
class Reason:
    """Why a step runs: a kind and a one-line detail."""

    kind: ReasonKind
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.detail}" if self.detail else self.kind.value

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.name.lower(), "detail": self.detail}


@dataclass
class PlannedStep:
    """One step of the plan."""

    step: Step
    hash: str
    output_path: str
    action: Action
    reasons: list[Reason] = field(default_factory=list)
    deps: list[int] = field(default_factory=list)  # indexes into Plan.steps
    env_note: str | None = None  # cached, but built in a different environment
    cache_hit: CacheHit | None = None  # when the action is FETCH
    realised: Realised | None = None  # when the action is REUSE

    @property
    def name(self) -> str:
        return self.step.name

    @property
    def output_name(self) -> str:
        return f"{self.step.name}-{self.hash[:16]}"

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
        }


@dataclass
class Plan:
    """Every distinct step (by hash) reachable from the targets, dependencies first."""

    store: StepStore
    steps: list[PlannedStep]
    pos_of: dict[int, int] = field(default_factory=dict)  # id(step object) -> index in steps
    estimate: Any = None  # marin.execution.estimate.PlanEstimate, when the runner made one
    salt: str | None = None  # the environment digest in every hash (--strict-env)
    published: dict[int, str] = field(default_factory=dict)
    """The output digests of the steps this run published, by position: their dependents read
    them here rather than from the success records just written."""
    listings: FolderListings = field(default_factory=FolderListings, repr=False)
    """The store's folders as planning listed them (each once)."""
    _earlier: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict, repr=False)

    def earlier_builds(self, name: str) -> list[tuple[str, dict[str, Any]]]:
        """Finished builds of the step ``name`` (any hash): (output path, provenance), newest
        first, as planning found them (:meth:`StepStore.earlier_builds`, read once per name)."""
        if name not in self._earlier:
            listing = self.listings.names(parent_folder(self.store.prefix, name))
            self._earlier[name] = self.store.earlier_builds(name, listing)
        return self._earlier[name]

    def paths(self) -> dict[int, str]:
        """``{id(step): output path}`` for every step object of the graph (for placeholders)."""
        return {key: self.steps[pos].output_path for key, pos in self.pos_of.items()}

    def hashes(self) -> dict[int, str]:
        """``{id(step): hash}`` for every step object of the graph."""
        return {key: self.steps[pos].hash for key, pos in self.pos_of.items()}

    def to_run(self) -> list[PlannedStep]:
        """Steps that must be built here (not cached, not in a cache)."""
        return [p for p in self.steps if p.action is Action.RUN]

    def to_do(self) -> list[PlannedStep]:
        """Steps the run must act on: build, fetch or reuse."""
        return [p for p in self.steps if p.action in (Action.RUN, Action.FETCH, Action.REUSE)]

    def to_json(self) -> dict[str, Any]:
        return {
            "prefix": self.store.prefix,
            "steps": [p.to_json() for p in self.steps],
            "summary": {a.value: sum(1 for p in self.steps if p.action is a) for a in Action},
            "estimate": self.estimate.to_json() if self.estimate is not None else None,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)


def _match_any(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def select(targets: Iterable[Step | Lazy], only: Sequence[str] = ()) -> list[Step]:
    """The target steps, narrowed to those matching ``only`` (their dependencies come along)."""
    roots = lower_targets(targets)
    if not only:
        return roots
    graph = collect_graph(roots)
    chosen = [s for s in graph if _match_any(s.name, only)]
    for pattern in only:
        if not any(fnmatch.fnmatchcase(s.name, pattern) for s in graph):
            names = ", ".join(sorted({s.name for s in graph})[:8])
            raise UnknownStep(f"--only {pattern!r} matches no step (steps: {names}{', ...' if len(graph) > 8 else ''})")
    return chosen


def _why_changed(step: Step, hashes: dict[int, str], plan: Plan, runs: set[int]) -> list[Reason]:
    """Reasons a step not built at this hash runs, against the newest earlier build of its name."""
    reasons: list[Reason] = []
    changed_deps = [d for d in dependencies_of(step) if id(d) in runs]
    if changed_deps:
        names = ", ".join(sorted({d.name for d in changed_deps}))
        reasons.append(Reason(ReasonKind.UPSTREAM_CHANGED, names))
    earlier = plan.earlier_builds(step.name)
    if not earlier:
        # Nothing of this name was built before: it is new, whatever its inputs did.
        return [Reason(ReasonKind.NEW, "no earlier build of this name")]
    _, prov = earlier[0]
    old_version = prov.get("version")
    if old_version is not None and old_version != step.version:
        reasons.append(Reason(ReasonKind.VERSION_BUMPED, f"{old_version} → {step.version}"))
    old_fn = prov.get("fn")
    if old_fn is not None and old_fn != fn_identity(step.fn):
        reasons.append(Reason(ReasonKind.FN_CHANGED, f"{old_fn} → {fn_identity(step.fn)}"))
    old_flat = prov.get("config_flat")
    if isinstance(old_flat, dict):
        # A damaged record of an old build explains less; it must never stop the plan.
        old_flat = {k: v for k, v in old_flat.items() if isinstance(v, str)}
        dependency_keys: set[str] = set()
        new_flat = flatten_config(step.config, hashes, dependency_keys=dependency_keys)
        for key in sorted(set(old_flat) | set(new_flat)):
            before, after = old_flat.get(key), new_flat.get(key)
            if before == after:
                continue
            if key in dependency_keys and before is not None and holds_dependency(before):
                if changed_deps:
                    continue  # already explained by the upstream change
                reasons.append(Reason(ReasonKind.UPSTREAM_CHANGED, f"{key} now points at another build"))
                continue
            reasons.append(Reason(ReasonKind.CONFIG_CHANGED, f"{key}: {_show(before)} → {_show(after)}"))
    if not reasons:
        if prov.get("env_digest") and prov.get("strict_env"):
            reasons.append(Reason(ReasonKind.ENV_CHANGED, "the environment fingerprint differs (--strict-env)"))
        else:
            reasons.append(Reason(ReasonKind.NEW, "no earlier build at this hash"))
    return reasons


def _show(encoded: str | None) -> str:
    if encoded is None:
        return "(absent)"
    try:
        value = json.loads(encoded)
    except ValueError:
        return encoded
    return describe_encoded(value)


def _start_note(step: Step, hashes: dict[int, str], store: StepStore) -> str | None:
    """Where a build of ``step`` would start, when its function can tell (``fn.describe_start``).

    A training step may start from a checkpoint of another build (a branch, or an extension of
    an earlier build of itself); its function says so with a ``describe_start(step, hashes,
    store)`` attribute returning one line, or None for "from scratch".
    """
    describe = getattr(step.fn, "describe_start", None)
    if not callable(describe):
        return None
    note = describe(step, hashes, store)
    if note is not None and not isinstance(note, str):
        raise TypeError(f"{step.name}: describe_start must return a line of text or None, got {type(note).__name__}")
    return note


def _earlier_attempt(record: StepRecord) -> Reason | None:
    status = record.read_status()
    if status.state is BuildState.FAILED:
        error = status.error.splitlines()[0] if status.error else ""
        return Reason(ReasonKind.EARLIER_FAILED, error[:200])
    if status.state is BuildState.RUNNING:
        return Reason(ReasonKind.RESUMING, f"another runner holds it ({status.holder})")
    if status.state is BuildState.KILLED:
        return Reason(ReasonKind.EARLIER_KILLED, f"attempt {status.attempt or '?'} by {status.holder or '?'}")
    return None



def _refuse_escape(store: StepStore, output: str, real_parents: dict[str, str]) -> None:
    """Raise :class:`InvalidStep` when a local output folder resolves outside the prefix.

    A name cannot climb out (``validate_step_name``), but a symlink inside the prefix can: a step
    would then write, and ``--force`` wipe, a folder elsewhere on the machine. ``real_parents``
    caches resolved parent folders: siblings share them, so a large graph costs one lstat a step.
    """
    from rigging import filesystem as fs

    if not fs.is_local(output):
        return
    local = fs.strip_protocol(output)
    parent, base = os.path.split(local)
    if "" not in real_parents:
        real_parents[""] = os.path.realpath(fs.strip_protocol(store.prefix))
    root = real_parents[""]
    if parent not in real_parents:
        real_parents[parent] = os.path.realpath(parent)
    real = os.path.join(real_parents[parent], base)
    if os.path.islink(local):
        real = os.path.realpath(local)
    if real != local and not real.startswith(root.rstrip(os.sep) + os.sep):
        raise InvalidStep(f"output folder {local} resolves to {real}, outside the prefix {root} "
                          "(a symlink?); remove the link or choose another prefix")


def make_plan(
    targets: Iterable[Step | Lazy],
    store: StepStore,
    *,
    force: Sequence[str] = (),
    only: Sequence[str] = (),
    salt: str | None = None,
    explain: bool = True,
    env_digest: str | None = None,
    caches: Sequence[str] = (),
    early_cutoff: bool = True,
) -> Plan:
    """Plan ``targets``: which steps are cached, which run and why.

    Args:
        targets: the steps (or lazy handles) asked for.
        store: where outputs live.
        force: glob patterns of step names to rebuild even if cached.
        only: glob patterns: run only matching steps and their dependencies.
        salt: the environment fingerprint digest, when it is part of the hash (--strict-env).
        explain: compute the reasons (reads earlier builds); off for the fast no-op path.
        env_digest: the current environment's digest, to note cached steps built elsewhere.
        caches: read-only caches (other prefixes) to fetch finished steps from.
        early_cutoff: reuse an earlier build of a step whose inputs' content is unchanged
            (``marin.execution.realise``); off, every step downstream of a rebuilt one runs.
    """
    roots = select(targets, only)
    graph = collect_graph(roots)
    hashes = hash_graph(roots, salt, graph=graph)
    for pattern in force:
        if not any(fnmatch.fnmatchcase(s.name, pattern) for s in graph):
            raise UnknownStep(f"--force {pattern!r} matches no step")
    # One entry per distinct hash, in dependency order.
    index: dict[str, int] = {}
    planned: list[PlannedStep] = []
    pos_of: dict[int, int] = {}
    steps_at: list[list[Step]] = []
    real_parents: dict[str, str] = {}
    for step in graph:
        digest = hashes[id(step)]
        if digest in index:
            pos_of[id(step)] = index[digest]
            steps_at[index[digest]].append(step)
            continue
        output = store.output_path(f"{step.name}-{digest[:16]}")
        _refuse_escape(store, output, real_parents)
        pos = len(planned)
        index[digest] = pos
        pos_of[id(step)] = pos
        planned.append(PlannedStep(step=step, hash=digest, output_path=output, action=Action.CACHED))
        steps_at.append([step])
    for step in graph:
        p = planned[pos_of[id(step)]]
        if not p.deps:
            p.deps = sorted({pos_of[id(d)] for d in dependencies_of(step)})
    root_pos = {pos_of[id(r)] for r in roots}
    # Which steps are needed: targets, and dependencies of needed steps that must run.
    # One listing of the store's done index answers for every step (marin.execution.done_index).
    from marin.execution.done_index import UNKNOWN_ENV, done_outputs

    plan = Plan(store, planned, pos_of, salt=salt)
    built_in = done_outputs(store.prefix, [p.output_name for p in planned], plan.listings)
    done = [p.output_name in built_in for p in planned]
    forced = [_match_any(p.name, force) or p.step.version == DEV_VERSION for p in planned]
    needed = [False] * len(planned)
    for pos in range(len(planned) - 1, -1, -1):
        # A forced step is rebuilt even when a done dependent would otherwise cover it.
        if pos in root_pos or forced[pos]:
            needed[pos] = True
        if not needed[pos] or (done[pos] and not forced[pos]):
            continue
        if caches and not forced[pos]:
            from marin.execution.cache import find_in_caches

            planned[pos].cache_hit = find_in_caches(planned[pos].output_name, caches)
            if planned[pos].cache_hit is not None:
                continue  # fetched whole: its inputs are not needed here
        for d in planned[pos].deps:
            needed[d] = True
    runs: set[int] = set()
    for pos, p in enumerate(planned):
        if forced[pos] and needed[pos]:
            p.action = Action.RUN
            # A "dev" version is forced on every run: the runner rebuilds it like a --force match.
            p.reasons = [Reason(ReasonKind.FORCED, "--force" if _match_any(p.name, force)
                                else 'version "dev" rebuilds on every run')]
        elif done[pos]:
            p.action = Action.CACHED
        elif not needed[pos]:
            p.action = Action.UNNEEDED
        elif p.cache_hit is not None:
            p.action = Action.FETCH
            p.reasons = [Reason(ReasonKind.IN_CACHE, p.cache_hit.cache)]
        else:
            p.action = Action.RUN
            if explain:
                # No folder, no records: an output never attempted has no earlier attempt to read.
                earlier = _earlier_attempt(StepRecord(p.output_path)) if plan.listings.has(p.output_path) else None
                p.reasons = [earlier] if earlier else _why_changed(p.step, hashes, plan, runs)
                start = _start_note(p.step, hashes, store)
                if start:
                    p.reasons.append(Reason(ReasonKind.STARTS_FROM, start))
        if p.action is Action.RUN:
            # Every step object with this hash counts as running for its dependents' reasons.
            runs.update(id(s) for s in steps_at[pos])
        if p.action is Action.CACHED and explain and env_digest:
            built = built_in.get(p.output_name)
            if built == UNKNOWN_ENV:  # indexed without its environment: ask the provenance
                prov = StepRecord(p.output_path).read_json(StepRecord(p.output_path).provenance) or {}
                built = prov.get("env_digest") or UNKNOWN_ENV
            if built is not None and built != UNKNOWN_ENV and built[:16] != env_digest[:16]:
                p.env_note = "built in a different environment"
    if early_cutoff and any(p.action is Action.RUN for p in planned):
        from marin.execution.realise import plan_reuse

        plan_reuse(plan, [store.prefix, *caches])
    return plan
