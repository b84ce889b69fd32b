"""The plan's phases one at a time (select, hash, need, decide, explain, reuse), the plan as a value,
and the run's state as the only thing that changes while a run goes on."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
import steps_for_tests as t

from marin.execution.core.errors import InvalidStep
from marin.execution.core.step import Step
from marin.execution.plan.make import decide, explain_runs, hash_steps, make_plan, need, select
from marin.execution.plan.model import Action, Plan, PlannedStep, ReasonKind, StoreView, UnknownStep
from marin.execution.plan.reuse import plan_reuse
from marin.execution.run.outcome import Outcome, StepOutcome
from marin.execution.run.runner import StepRunner
from marin.execution.run.state import RunState
from marin.execution.store.cache import CacheHit
from marin.execution.store.store import StepStore


def _store(tmp_path) -> StepStore:
    return StepStore(str(tmp_path / "store"))


def _build(store: StepStore, steps) -> None:
    assert StepRunner(prefix=store.prefix, client=t.InProcessClient(), poll_interval=0.01).run(steps).ok


# -- select -------------------------------------------------------------------------------------

def test_select_narrows_to_matching_steps_and_names_a_pattern_that_matches_nothing():
    g = t.diamond()
    assert [s.name for s in select([g["d"], g["e"]])] == ["g/d", "g/e"]
    assert [s.name for s in select([g["d"], g["e"]], only=["g/b", "g/e"])] == ["g/b", "g/e"]
    with pytest.raises(UnknownStep, match=r"--only 'g/zz' matches no step \(steps: g/a, g/b"):
        select([g["d"]], only=["g/zz"])


# -- hash ---------------------------------------------------------------------------------------

def test_hash_phase_keeps_one_entry_per_hash_with_its_inputs_positions(tmp_path):
    g = t.diamond()
    twin = t.node("g/a")  # another object, the same step: one entry, two objects
    graph = hash_steps([g["d"], twin], _store(tmp_path))
    names = [s.name for s in graph.entries]
    assert names == ["g/a", "g/b", "g/c", "g/d"]
    assert graph.pos_of[id(twin)] == graph.pos_of[id(g["a"])] == 0
    assert [len(objs) for objs in graph.steps_at] == [2, 1, 1, 1]
    assert graph.deps == [(), (0,), (0,), (1, 2)]
    assert graph.roots == frozenset({0, 3})
    assert graph.outputs[3] == os.path.join(str(tmp_path / "store"), f"g/d-{g['d'].hash[:16]}")


def test_hash_phase_refuses_an_output_folder_that_links_outside_the_prefix(tmp_path):
    store = _store(tmp_path)
    step = t.node("g/a")
    os.makedirs(os.path.join(store.prefix, "g"))
    os.makedirs(tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", os.path.join(store.prefix, "g", f"a-{step.hash[:16]}"))
    with pytest.raises(InvalidStep, match="outside the prefix"):
        hash_steps([step], store)


# -- need and decide ------------------------------------------------------------------------------

def test_need_stops_at_done_steps_and_at_cache_hits(tmp_path):
    graph = hash_steps([t.diamond()["d"]], _store(tmp_path))
    asked: list[int] = []

    def lookup(pos: int) -> CacheHit | None:
        asked.append(pos)
        return CacheHit(cache="c", path="c/x") if pos == 1 else None

    # Nothing done: everything needed; g/b (1) is found in a cache, so it needs no inputs of its
    # own, but g/c (2) still needs g/a.
    needed, hits = need(graph, done=[False] * 4, forced=[False] * 4, cache_lookup=lookup)
    assert needed == [True, True, True, True] and set(hits) == {1}
    assert sorted(asked) == [0, 1, 2, 3]
    # The target is done: nothing below it is needed (and no cache is asked).
    asked.clear()
    needed, hits = need(graph, done=[False, False, False, True], forced=[False] * 4, cache_lookup=lookup)
    assert needed == [False, False, False, True] and hits == {} and asked == []
    # A forced input is needed even below a done target, and never looked up in a cache.
    needed, _ = need(graph, done=[True, True, True, True], forced=[True, False, False, False], cache_lookup=lookup)
    assert needed == [True, False, False, True] and 0 not in asked


@pytest.mark.parametrize(("done", "forced", "needed", "hit", "action"), [
    (False, False, True, False, Action.RUN),
    (True, False, True, False, Action.CACHED),
    (True, True, True, False, Action.RUN),
    (False, False, False, False, Action.UNNEEDED),
    (False, False, True, True, Action.FETCH),
    (False, True, True, True, Action.RUN),
])
def test_decide(done, forced, needed, hit, action):
    assert decide(done, forced, needed, CacheHit("c", "c/x") if hit else None) is action


# -- explain --------------------------------------------------------------------------------------

def test_explain_names_new_changed_and_upstream_steps(tmp_path):
    store = _store(tmp_path)
    _build(store, [t.diamond()["d"]])
    changed = t.diamond(b={"value": 5})
    graph = hash_steps([changed["d"]], store)
    actions = [Action.CACHED, Action.RUN, Action.CACHED, Action.RUN]
    reasons = explain_runs(graph, actions, StoreView(store))
    assert set(reasons) == {1, 3}
    assert [r.kind for r in reasons[1]] == [ReasonKind.CONFIG_CHANGED]
    assert reasons[1][0].detail == "value: 0 → 5"
    assert [r.kind for r in reasons[3]] == [ReasonKind.UPSTREAM_CHANGED] and reasons[3][0].detail == "g/b"


# -- start ----------------------------------------------------------------------------------------

def test_the_run_hands_the_step_the_start_the_plan_decided_even_when_the_store_changed_since(tmp_path):
    from marin.execution.core.traits import Start
    from marin.execution.run.outcome import QuietReporter
    from marin.execution.store.records import StepRecord
    from rigging import filesystem as fs

    store = _store(tmp_path)
    first = Step("cont/x", t.continue_newest, t.ContinueConfig(1))
    _build(store, [first])
    first_path = store.output_path_of("cont/x", first.hash)
    second = Step("cont/x", t.continue_newest, t.ContinueConfig(2))
    planned = []

    class AnotherBuildAppears(QuietReporter):
        def planned(self, plan):
            planned.append(plan.steps[plan.position(second)])
            _build(store, [Step("cont/x", t.continue_newest, t.ContinueConfig(3))])  # newer than the first

    result = StepRunner(prefix=store.prefix, client=t.InProcessClient(), poll_interval=0.01,
                        reporter=AnotherBuildAppears()).run([second])
    assert result.ok
    expected = Start(f"continues {os.path.basename(first_path)}", extends=first_path, step=1)
    assert planned[0].start == expected
    assert [r.detail for r in planned[0].reasons if r.kind is ReasonKind.STARTS_FROM] == [expected.note]
    told = json.loads(fs.read_text(fs.join(result.by_name("cont/x").output_path, "start.json")))
    assert told == {"value": 2, "start": expected.to_json()}
    provenance = StepRecord(result.by_name("cont/x").output_path).read_provenance()
    assert provenance is not None and {"kind": "starts_from", "detail": expected.note} in (provenance.reasons or [])


def test_a_plan_without_explain_decides_no_start(tmp_path):
    store = _store(tmp_path)
    _build(store, [Step("cont/x", t.continue_newest, t.ContinueConfig(1))])
    plan = make_plan([Step("cont/x", t.continue_newest, t.ContinueConfig(2))], store, explain=False)
    assert [p.start for p in plan.steps] == [None]
    assert make_plan([Step("cont/x", t.continue_newest, t.ContinueConfig(2))], store).steps[0].start is not None


# -- the plan as a value ----------------------------------------------------------------------------

def test_a_plan_never_changes_and_its_refinements_are_new_plans(tmp_path):
    store = _store(tmp_path)
    plan = make_plan([t.diamond()["d"]], store)
    assert isinstance(plan.steps, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.steps[0].action = Action.CACHED  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.salt = "x"  # type: ignore[misc]
    changed = dataclasses.replace(plan.steps[0], action=Action.CACHED)
    other = plan.with_steps({0: changed})
    assert other.steps[0].action is Action.CACHED and plan.steps[0].action is Action.RUN
    assert other.steps[1] is plan.steps[1]


def test_reuse_phase_returns_a_new_plan_and_leaves_the_old_one(tmp_path):
    store = _store(tmp_path)
    _build(store, [t.diamond()["d"]])
    # g/a rebuilt (version bump) with the same output: g/b, g/c and g/d can stand on the old builds.
    bumped = t.diamond(a={"version": "v2"})
    plan = make_plan([bumped["d"]], store, early_cutoff=False)
    assert [p.action for p in plan.steps] == [Action.RUN] * 4
    # With g/a's new build published under its digest, the dependents' keys match the old builds.
    assert StepRunner(prefix=store.prefix, client=t.InProcessClient(), poll_interval=0.01,
                      only=["g/a"]).run([bumped["d"]]).ok
    before = make_plan([bumped["d"]], store, early_cutoff=False)
    after = plan_reuse(before, [store.prefix])
    assert [p.action for p in before.steps] == [Action.CACHED, Action.RUN, Action.RUN, Action.RUN]
    # g/d stands on the builds g/b and g/c reuse: their digests are known from those builds.
    assert [p.action for p in after.steps] == [Action.CACHED, Action.REUSE, Action.REUSE, Action.REUSE]
    assert after.steps[1].realised is not None and before.steps[1].realised is None


# -- the run's state ------------------------------------------------------------------------------

def _entry(name: str, action: Action, deps: tuple[int, ...] = (), *inputs: PlannedStep) -> PlannedStep:
    step = t.node(name, "", *(i.step for i in inputs))
    return PlannedStep(step=step, hash=step.hash, output_path=f"/nowhere/{name}", action=action, deps=deps)


def test_run_state_changes_entries_but_never_the_plan(tmp_path):
    a = _entry("s/a", Action.CACHED)
    b = _entry("s/b", Action.FETCH, (0,), a)
    entries = (a, b, _entry("s/c", Action.RUN, (1,), b))
    plan = Plan(_store(tmp_path), entries, {id(p.step): i for i, p in enumerate(entries)},
                StoreView(_store(tmp_path)))
    settled: list[StepOutcome] = []
    state = RunState(plan, on_settle=settled.append)
    state.start({0: StepOutcome.of(entries[0], Outcome.CACHED)})
    assert list(state.pending) == [1, 2]
    assert not state.inputs_ready(2) and state.inputs_ready(1)
    run = state.build_here(1, "cache entry refused; rebuilding")
    assert run.action is Action.RUN and state.entry(1) is run and plan.steps[1].action is Action.FETCH
    assert state.current_plan().steps[1] is run and state.current_plan() is not plan
    state.published(1, "d" * 64, "/elsewhere/s/b")
    assert state.digest_of(1) == "d" * 64
    # Its dependents are handed where the build's files are, as published (no record read).
    assert state.files_folder(1) == "/elsewhere/s/b"
    assert state.input_paths(2)[id(entries[1].step)] == "/elsewhere/s/b"
    state.settle(1, StepOutcome.of(run, Outcome.RAN))
    assert list(state.pending) == [2] and [o.name for o in settled] == ["s/b"] and state.inputs_ready(2)


def test_run_state_changes_only_through_its_methods(tmp_path):
    entries = (_entry("s/a", Action.RUN), _entry("s/b", Action.RUN, (0,)))
    plan = Plan(_store(tmp_path), entries, {id(p.step): i for i, p in enumerate(entries)},
                StoreView(_store(tmp_path)))
    settled: list[StepOutcome] = []
    state = RunState(plan, on_settle=settled.append)
    state.start({})
    for view in (state.outcomes, state.running, state.waiting_on, state.expansions):
        with pytest.raises(TypeError):
            view[0] = None  # type: ignore[index]
    assert not hasattr(state.pending, "append") and not hasattr(state.pending, "remove")
    attempt = object()
    state.started(0, attempt)  # type: ignore[arg-type]
    assert list(state.pending) == [1] and dict(state.running) == {0: attempt}
    state.ended(0, None)  # lost its lease: pending again, after the others
    assert list(state.pending) == [1, 0] and not state.running and not settled
    assert state.wait_on(0, "other") and not state.wait_on(0, "other") and state.waiting_on == {0: "other"}
    state.started(0, attempt)  # type: ignore[arg-type]
    state.ended(0, StepOutcome.of(entries[0], Outcome.RAN))
    assert [o.name for o in settled] == ["s/a"] and state.built(0) and list(state.pending) == [1]


def test_run_state_brings_unneeded_inputs_into_the_run(tmp_path):
    entries = (_entry("s/a", Action.UNNEEDED), _entry("s/b", Action.UNNEEDED, (0,)), _entry("s/c", Action.RUN, (1,)))
    plan = Plan(_store(tmp_path), entries, {id(p.step): i for i, p in enumerate(entries)},
                StoreView(_store(tmp_path)))
    state = RunState(plan)
    state.start({0: StepOutcome.of(entries[0], Outcome.UNNEEDED), 1: StepOutcome.of(entries[1], Outcome.UNNEEDED)})
    assert state.activate_inputs(2, caches=(), find_in_caches=lambda name, caches: None)
    assert sorted(state.pending) == [0, 1, 2]
    assert state.entry(0).action is Action.RUN and state.entry(1).action is Action.RUN
    assert [r.kind for r in state.entry(1).reasons] == [ReasonKind.UPSTREAM_CHANGED]
    assert plan.steps[0].action is Action.UNNEEDED
