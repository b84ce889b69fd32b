"""Making a plan, in named phases: select, hash, need (with caches), decide, explain, start, reuse.

Each phase is one function of what the ones before it found; :func:`make_plan` runs them in
order. The estimate (:mod:`marin.execution.plan.estimate`) is a phase the runner adds when it
has something to build.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from marin.execution.core.encoding import config_walk
from marin.execution.core.errors import InvalidStep
from marin.execution.core.graph import collect_graph, dependencies_of
from marin.execution.core.hashing import hash_graph
from marin.execution.core.lazy import lower_targets
from marin.execution.core.placeholders import Placeholder
from marin.execution.core.sources import SourceKey
from marin.execution.core.step import DEV_VERSION, Step, output_name_of
from marin.execution.core.traits import Start, traits_of
from marin.execution.plan.clashes import name_clashes
from marin.execution.plan.expansion import expands, expansion_of
from marin.execution.plan.explain import earlier_attempt, plan_start, start_reason, step_notes, why_changed
from marin.execution.plan.inputs import code_changes_of, fingerprint_graph
from marin.execution.plan.model import (
    Action,
    Plan,
    PlannedStep,
    Reason,
    ReasonKind,
    StoreView,
    UnknownStep,
)
from marin.execution.plan.resources import accelerator_ignored
from marin.execution.plan.reuse import plan_reuse
from marin.execution.store.cache import CacheHit, find_in_caches
from marin.execution.store.done_index import UNKNOWN_ENV, done_outputs, split_stamp
from marin.execution.store.step_record import StepRecord
from marin.execution.store.store import StepStore
from rigging import filesystem as fs

if TYPE_CHECKING:
    from marin.execution.store.sources import SourceFingerprint

__all__ = ["HashedGraph", "decide", "explain_runs", "hash_steps", "make_plan", "need", "plan_starts", "select"]


def _match_any(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


# -- select -----------------------------------------------------------------------------------

def select(targets: Iterable[Placeholder], only: Sequence[str] = ()) -> list[Step]:
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


# -- hash -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HashedGraph:
    """The graph of the selected targets, one entry per distinct hash, dependencies first."""

    hashes: dict[int, str]
    """``{id(step object): hash}`` of every step object reached."""
    entries: list[Step]
    """One step object per distinct hash."""
    pos_of: dict[int, int]
    """``id(step object)`` → position of its entry."""
    steps_at: list[list[Step]]
    """The step objects of each entry."""
    deps: list[tuple[int, ...]]
    """Positions each entry reads."""
    outputs: list[str]
    """Each entry's output folder under the prefix."""
    roots: frozenset[int]
    """Positions of the targets."""
    sources: dict[SourceKey, SourceFingerprint] = dataclasses.field(default_factory=dict)
    """What every source the graph reads held when it was hashed."""

    def sources_of(self, pos: int) -> tuple[SourceFingerprint, ...]:
        """The fingerprints of the sources entry ``pos`` reads, in the order its config holds them."""
        return tuple(self.sources[s.key] for s in config_walk(self.entries[pos]).sources)


def hash_steps(roots: Sequence[Step], store: StepStore, salt: str | None = None,
               extra: Sequence[Step] = ()) -> HashedGraph:
    """Hash every step reachable from ``roots`` (and ``extra``: planned too, but not targets) and
    place each distinct one under the prefix.

    Raises:
        InvalidStep: an output folder would resolve outside the prefix (a symlink).
    """
    graph = collect_graph([*roots, *extra])
    sources = fingerprint_graph(graph)
    hashes = hash_graph([*roots, *extra], salt, graph=graph, fingerprints={k: f.digest for k, f in sources.items()})
    index: dict[str, int] = {}
    entries: list[Step] = []
    pos_of: dict[int, int] = {}
    steps_at: list[list[Step]] = []
    outputs: list[str] = []
    real_parents: dict[str, str] = {}
    for step in graph:
        digest = hashes[id(step)]
        if digest in index:
            pos_of[id(step)] = index[digest]
            steps_at[index[digest]].append(step)
            continue
        output = store.output_path_of(step.name, digest)
        _refuse_escape(store, output, real_parents)
        index[digest] = pos_of[id(step)] = len(entries)
        entries.append(step)
        steps_at.append([step])
        outputs.append(output)
    deps = [tuple(sorted({pos_of[id(d)] for d in dependencies_of(step)})) for step in entries]
    return HashedGraph(hashes, entries, pos_of, steps_at, deps, outputs, frozenset(pos_of[id(r)] for r in roots),
                       sources)


def _refuse_escape(store: StepStore, output: str, real_parents: dict[str, str]) -> None:
    """Raise :class:`InvalidStep` when a local output folder resolves outside the prefix.

    A name cannot climb out (``validate_step_name``), but a symlink inside the prefix can: a step
    would then write, and ``--force`` wipe, a folder elsewhere on the machine. ``real_parents``
    caches resolved parent folders: siblings share them, so a large graph costs one lstat a step.
    """
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


# -- need (and caches) --------------------------------------------------------------------------

def need(graph: HashedGraph, done: Sequence[bool], forced: Sequence[bool],
         cache_lookup: Callable[[int], CacheHit | None]) -> tuple[list[bool], dict[int, CacheHit]]:
    """Which entries the run needs: the targets, forced entries, and the inputs of needed entries
    that must be built. An entry found in a cache (``cache_lookup``, asked only of needed entries
    that are not done or forced) is fetched whole: its inputs are not needed for it.

    Returns:
        (needed, per position, and the cache hits by position).
    """
    needed = [False] * len(graph.entries)
    hits: dict[int, CacheHit] = {}
    for pos in range(len(graph.entries) - 1, -1, -1):
        # A forced step is rebuilt even when a done dependent would otherwise cover it.
        if pos in graph.roots or forced[pos]:
            needed[pos] = True
        if not needed[pos] or (done[pos] and not forced[pos]):
            continue
        if not forced[pos]:
            hit = cache_lookup(pos)
            if hit is not None:
                hits[pos] = hit
                continue
        for d in graph.deps[pos]:
            needed[d] = True
    return needed, hits


# -- decide -----------------------------------------------------------------------------------

def decide(done: bool, forced: bool, needed: bool, hit: CacheHit | None) -> Action:
    """What the run does with one entry."""
    if forced and needed:
        return Action.RUN
    if done:
        return Action.CACHED
    if not needed:
        return Action.UNNEEDED
    return Action.FETCH if hit is not None else Action.RUN


# -- explain ----------------------------------------------------------------------------------

def explain_runs(graph: HashedGraph, actions: Sequence[Action], view: StoreView) -> dict[int, tuple[Reason, ...]]:
    """Why each entry that runs (and is not forced) runs."""
    runs: set[int] = set()
    for pos, action in enumerate(actions):
        if action is Action.RUN:
            # Every step object with this hash counts as running for its dependents' reasons.
            runs.update(id(s) for s in graph.steps_at[pos])
    reasons: dict[int, tuple[Reason, ...]] = {}
    for pos, action in enumerate(actions):
        if action is not Action.RUN:
            continue
        step, output = graph.entries[pos], graph.outputs[pos]
        # No folder, no records: an output never attempted has no earlier attempt to read.
        earlier = earlier_attempt(StepRecord(output)) if view.listings.has(output) else None
        found = [earlier] if earlier else why_changed(step, graph.hashes, view.earlier_builds, runs,
                                                      graph.sources_of(pos))
        reasons[pos] = tuple(found)
    return reasons


# -- start ------------------------------------------------------------------------------------

def plan_starts(graph: HashedGraph, actions: Sequence[Action], view: StoreView,
                forced: Sequence[bool] = ()) -> dict[int, Start]:
    """Where each entry that runs starts, when its traits decide it (a branch, an extension of an
    earlier build, an earlier build's per-file outputs to reuse): decided once, here, from what
    planning read of the store; the run hands it to the step unchanged, so ``marin plan`` and the
    build cannot disagree. A forced build (``forced[pos]``) reuses no earlier build's parts: it is
    asked for to make everything again."""
    starts: dict[int, Start] = {}
    for pos, action in enumerate(actions):
        if action is Action.RUN:
            start = plan_start(graph.entries[pos], graph.hashes, view.earlier_builds)
            if start is not None and start.reuse_parts is not None and pos < len(forced) and forced[pos]:
                start = None
            if start is not None:
                starts[pos] = start
    return starts


def _env_note(p: PlannedStep, stamp: str | None, env_digest: str) -> str | None:
    built = split_stamp(stamp)[0] if stamp is not None else None
    if built == UNKNOWN_ENV:  # indexed without its environment: ask the provenance
        prov = StepRecord(p.output_path).read_provenance()
        built = (prov.env_digest if prov is not None else None) or UNKNOWN_ENV
    if built is not None and built != UNKNOWN_ENV and built[:16] != env_digest[:16]:
        return "built in a different environment"
    return None


# -- the whole plan -----------------------------------------------------------------------------

def make_plan(
    targets: Iterable[Placeholder],
    store: StepStore,
    *,
    force: Sequence[str] = (),
    only: Sequence[str] = (),
    salt: str | None = None,
    explain: bool = True,
    env_digest: str | None = None,
    caches: Sequence[str] = (),
    early_cutoff: bool = True,
    view: StoreView | None = None,
    code_changes: str | None = None,
    expand_from_caches: bool = True,
) -> Plan:
    """Plan ``targets``: which steps are cached, which run and why.

    Expanding steps (:mod:`marin.execution.plan.expansion`) found built are expanded, and what
    they expand into is planned too, until no built expanding step is left unexpanded; one that
    must be built first says so (its expansion is planned by the run, once it is built).

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
            (:mod:`marin.execution.store.realisations`); off, every step downstream of a rebuilt one runs.
        view: what an earlier plan of this run read of the store (reused, not read again).
        code_changes: check the code of built steps against what built them (reads each built
            step's provenance): ``"warn"`` marks those whose code changed (they stay cached),
            ``"rebuild"`` builds them again; None does not look.
        expand_from_caches: expand a step from its entry in a cache; off (when entries must be
            signed: ``marin.execution.store.signing``) a step found only in a cache is expanded
            by the run, once it is fetched and checked.
    """
    roots = select(targets, only)
    view = view or StoreView(store)
    # id(expanding step) -> (the steps it expanded into, whether it was needed): a needed step's
    # expansion is built with it; an unneeded one's is planned (shown) but not asked for.
    expanded: dict[int, tuple[list[Step], bool]] = {}
    while True:
        asked = [s for found, was_needed in expanded.values() if was_needed for s in found]
        shown = [s for found, was_needed in expanded.values() if not was_needed for s in found]
        plan, needed = _plan_once([*roots, *asked], shown, store, force=force, salt=salt,
                                  explain=explain, env_digest=env_digest, caches=caches,
                                  early_cutoff=early_cutoff, view=view, code_changes=code_changes)
        fresh = [(pos, p, built_at) for pos, p in enumerate(plan.steps)
                 if id(p.step) not in expanded and expands(p.step)
                 and (built_at := _built_at(p, caches if expand_from_caches else ())) is not None]
        if not fresh:
            break
        for pos, p, built_at in fresh:
            expanded[id(p.step)] = (expansion_of(p.step, built_at), needed[pos])
    expansions = {plan.position(step): tuple(sorted({plan.position(s) for s in expanded[id(step)][0]}))
                  for step in (q.step for q in plan.steps) if id(step) in expanded}
    return dataclasses.replace(plan, expansions=expansions) if expansions else plan


def _built_at(p: PlannedStep, caches: Sequence[str]) -> str | None:
    """Where a built copy of ``p`` is, to expand it from: its output here, or the cache (of
    ``caches``) it is fetched from (or, unneeded here, would be); None when it is built nowhere yet."""
    if p.action is Action.CACHED:
        return StepRecord(p.output_path).files_folder()
    if p.action is Action.FETCH and p.cache_hit is not None and caches:
        return StepRecord(p.cache_hit.path).files_folder()
    if p.action is Action.UNNEEDED and caches:
        hit = find_in_caches(p.output_name, caches)
        return StepRecord(hit.path).files_folder() if hit is not None else None
    return None


def _plan_once(targets: list[Step], shown: list[Step], store: StepStore, *, force: Sequence[str],
               salt: str | None, explain: bool, env_digest: str | None, caches: Sequence[str],
               early_cutoff: bool, view: StoreView, code_changes: str | None) -> tuple[Plan, list[bool]]:
    """One pass of the phases over ``targets`` (and ``shown``, planned but not asked for): the
    plan, and which of its entries are needed."""
    graph = hash_steps(targets, store, salt, extra=shown)
    for pattern in force:
        if not any(_match_any(s.name, [pattern]) for steps in graph.steps_at for s in steps):
            raise UnknownStep(f"--force {pattern!r} matches no step")
    names = [output_name_of(s.name, graph.hashes[id(s)]) for s in graph.entries]
    # One listing of the store's done index answers for every step (store.done_index); what it
    # has out of date is left for a run to put right: planning never writes.
    lookup = done_outputs(store.prefix, names, view.listings)
    view.found_out_of_date(lookup.fixes)
    built_in = lookup.done
    done = [name in built_in for name in names]
    code_changed = code_changes_of(graph.entries, graph.outputs, [built_in.get(n) for n in names]) \
        if code_changes else {}
    rebuild_code = code_changes == "rebuild"
    forced = [_match_any(s.name, force) or s.version == DEV_VERSION or (rebuild_code and pos in code_changed)
              for pos, s in enumerate(graph.entries)]
    needed, hits = need(graph, done, forced,
                        lambda pos: find_in_caches(names[pos], caches) if caches else None)
    actions = [decide(done[pos], forced[pos], needed[pos], hits.get(pos)) for pos in range(len(names))]
    explained = explain_runs(graph, actions, view) if explain else {}
    # Without explain (the fast paths that build nothing) no start is decided: a build so planned
    # starts as its config says, which makes the same output.
    starts = plan_starts(graph, actions, view, forced) if explain else {}
    planned = []
    paths: dict[int, str] = {}  # made once, for the first step with notes to give
    for pos, step in enumerate(graph.entries):
        action = actions[pos]
        reasons: tuple[Reason, ...] = ()
        if action is Action.RUN and forced[pos] and rebuild_code and pos in code_changed \
                and not _match_any(step.name, force):
            reasons = (Reason(ReasonKind.CODE_CHANGED, ", ".join(code_changed[pos])),)
        elif action is Action.RUN and forced[pos]:
            # A "dev" version is forced on every run: the runner rebuilds it like a --force match.
            reasons = (Reason(ReasonKind.FORCED, "--force" if _match_any(step.name, force)
                              else 'version "dev" rebuilds on every run'),)
        elif action is Action.FETCH:
            reasons = (Reason(ReasonKind.IN_CACHE, hits[pos].cache),)
        elif action is Action.RUN:
            reasons = explained.get(pos, ())
        start = starts.get(pos)
        if start is not None:
            reasons += (start_reason(start),)
        if action is Action.RUN and expands(step):
            reasons += (Reason(ReasonKind.EXPANDS, "its output decides more steps, planned once it is built"),)
        if action is Action.RUN and explain and (ignored := accelerator_ignored(step)) is not None:
            reasons += (Reason(ReasonKind.WARNING, ignored),)
        if action is Action.RUN and explain and traits_of(step.fn).plan_notes is not None:
            paths = paths or {key: graph.outputs[p] for key, p in graph.pos_of.items()}
            reasons += step_notes(step, paths)
        p = PlannedStep(step=step, hash=graph.hashes[id(step)], output_path=graph.outputs[pos], action=action,
                        reasons=reasons, deps=graph.deps[pos], cache_hit=hits.get(pos) if action is Action.FETCH else None,
                        start=start, sources=graph.sources_of(pos), code_changed=code_changed.get(pos, ()))
        if action is Action.CACHED and explain and env_digest:
            note = _env_note(p, built_in.get(names[pos]), env_digest)
            if note is not None:
                p = dataclasses.replace(p, env_note=note)
        planned.append(p)
    plan = Plan(store, tuple(planned), graph.pos_of, view, salt=salt,
                name_clashes=name_clashes(graph.entries, graph.hashes))
    if early_cutoff and any(a is Action.RUN for a in actions):
        plan = plan_reuse(plan, [store.prefix, *caches])
    return plan, needed
