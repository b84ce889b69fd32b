"""The plan: for every step, cached or the reason it runs; each reason kind at least once."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import steps_for_tests as t

from marin.execution.core.step import Step
from marin.execution.plan.make import make_plan
from marin.execution.plan.model import Action, ReasonKind, UnknownStep
from marin.execution.run.outcome import Outcome
from marin.execution.run.runner import StepRunner
from marin.execution.store.records import StepRecord
from marin.execution.store.store import StepStore
from rigging import filesystem as fs
from rigging.lease import Lease
from testsupport.namespaces import gone_place, held_at


def _build(prefix: str, steps, **kwargs):
    result = StepRunner(prefix=prefix, max_parallel=2, client=t.InProcessClient(), poll_interval=0.01,
                        **kwargs).run(steps)
    return result


def _plan(prefix: str, steps, **kwargs):
    return StepRunner(prefix=prefix, max_parallel=2, **kwargs).plan(steps)


def _by_name(plan):
    return {p.name: p for p in plan.steps}


def _kinds(planned) -> list[ReasonKind]:
    return [r.kind for r in planned.reasons]


@pytest.fixture
def prefix(tmp_path) -> str:
    return str(tmp_path / "store")


def test_steps_never_built_are_new_even_below_new_steps(prefix):
    plan = _by_name(_plan(prefix, [t.diamond()["d"]]))
    assert plan["g/a"].action is Action.RUN
    for name in ("g/a", "g/b", "g/c", "g/d"):
        assert _kinds(plan[name]) == [ReasonKind.NEW], name
        assert plan[name].reasons[0].detail == "no earlier build of this name"


def test_cached_after_a_build(prefix):
    assert _build(prefix, [t.diamond()["d"]]).ok
    plan = _plan(prefix, [t.diamond()["d"]])
    assert {p.action for p in plan.steps} == {Action.CACHED}
    assert all(p.reasons == () for p in plan.steps)


def test_config_changed_names_the_field_with_old_and_new_value(prefix):
    assert _build(prefix, [t.node("cfg/x", value=1, extra={"lr": 0.001, "name": "small"})]).ok
    plan = _plan(prefix, [t.node("cfg/x", value=2, extra={"lr": 0.002, "name": "small"})])
    (p,) = plan.steps
    assert p.action is Action.RUN
    assert _kinds(p) == [ReasonKind.CONFIG_CHANGED, ReasonKind.CONFIG_CHANGED]
    details = sorted(r.detail for r in p.reasons)
    assert details == ["extra.lr: 0.001 → 0.002", "value: 1 → 2"]
    # An unhashed field is not a change at all.
    assert _plan(prefix, [t.node("cfg/x", value=1, extra={"lr": 0.001, "name": "small"},
                                 log_every=99)]).steps[0].action is Action.CACHED


def test_config_changed_against_the_newest_earlier_build(prefix):
    assert _build(prefix, [t.node("cfg/y", value=1)]).ok
    assert _build(prefix, [t.node("cfg/y", value=2)]).ok
    (p,) = _plan(prefix, [t.node("cfg/y", value=3)]).steps
    assert [r.detail for r in p.reasons] == ["value: 2 → 3"]


def test_upstream_changed_names_the_upstream_step(prefix):
    assert _build(prefix, [t.diamond()["d"]]).ok
    plan = _by_name(_plan(prefix, [t.diamond(c={"value": 9})["d"]]))
    assert plan["g/a"].action is Action.CACHED and plan["g/b"].action is Action.CACHED
    assert _kinds(plan["g/c"]) == [ReasonKind.CONFIG_CHANGED]
    assert plan["g/c"].reasons[0].detail == "value: 0 → 9"
    assert _kinds(plan["g/d"]) == [ReasonKind.UPSTREAM_CHANGED]
    assert plan["g/d"].reasons[0].detail == "g/c"


def test_version_bumped(prefix):
    assert _build(prefix, [t.node("ver/x")]).ok
    (p,) = _plan(prefix, [t.node("ver/x", version="v2")]).steps
    assert _kinds(p) == [ReasonKind.VERSION_BUMPED]
    assert p.reasons[0].detail == "v1 → v2"


def test_forced(prefix):
    assert _build(prefix, [t.diamond()["d"]]).ok
    plan = _by_name(_plan(prefix, [t.diamond()["d"]], force=["g/b"]))
    assert _kinds(plan["g/b"]) == [ReasonKind.FORCED]
    assert plan["g/b"].action is Action.RUN
    assert plan["g/d"].action is Action.CACHED and plan["g/a"].action is Action.CACHED
    with pytest.raises(UnknownStep, match="nope"):
        _plan(prefix, [t.diamond()["d"]], force=["nope"])


def test_earlier_attempt_failed(prefix, counter):
    result = _build(prefix, [t.node("fail/x", counter, fail=True)])
    assert result.steps[0].outcome is Outcome.FAILED
    (p,) = _plan(prefix, [t.node("fail/x", counter, fail=True)]).steps
    assert _kinds(p) == [ReasonKind.EARLIER_FAILED]
    assert "failed on purpose" in p.reasons[0].detail


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_earlier_attempt_killed_and_a_live_one_elsewhere(prefix):
    import socket

    step = t.node("kill/x")
    record = StepRecord(StepStore(prefix).output_path(step.output_name))
    dead = f"{socket.gethostname()}:{_dead_pid()}:gone"
    lease = Lease.acquire(record.meta, ttl=300, holder=dead)
    assert lease is not None
    held_at(lease.path, gone_place())  # its runner's process is gone
    record.write_json(record.status, {"state": "running", "attempt": 1, "holder": dead})
    (p,) = _plan(prefix, [step]).steps
    assert _kinds(p) == [ReasonKind.EARLIER_KILLED]
    assert dead in p.reasons[0].detail

    # A live lease held elsewhere: that runner is still at it.
    other = t.node("kill/y")
    rec_y = StepRecord(StepStore(prefix).output_path(other.output_name))
    assert Lease.acquire(rec_y.meta, ttl=300, holder="otherhost:1:busy") is not None
    rec_y.write_json(rec_y.status, {"state": "running", "attempt": 1, "holder": "otherhost:1:busy"})
    (p,) = _plan(prefix, [other]).steps
    assert _kinds(p) == [ReasonKind.RESUMING]


def test_plan_json_is_valid_and_has_reasons(prefix):
    assert _build(prefix, [t.node("js/a")]).ok
    plan = _plan(prefix, [t.diamond()["d"], t.node("js/a")])
    data = json.loads(plan.dumps())
    rows = {s["name"]: s for s in data["steps"]}
    assert rows["js/a"]["action"] == "cached" and rows["js/a"]["reasons"] == []
    assert rows["g/a"]["reasons"] == [{"kind": "new", "detail": "no earlier build of this name"}]
    assert rows["g/d"]["reasons"][0]["kind"] == "new"  # never built, though its inputs are new too
    assert data["summary"]["cached"] == 1 and data["summary"]["run"] == 4
    assert data["prefix"] == prefix


def test_a_done_target_does_not_need_its_missing_dependencies(prefix):
    g = t.diamond()
    result = _build(prefix, [g["d"]])
    assert result.ok
    fs.rm_tree(result.by_name("g/a").output_path)
    plan = _by_name(_plan(prefix, [t.diamond()["d"]]))
    assert plan["g/d"].action is Action.CACHED
    assert plan["g/a"].action is Action.UNNEEDED


def test_only_selects_steps_and_their_dependencies(prefix):
    plan = _plan(prefix, [t.diamond()["d"], t.diamond()["e"]], only=["g/b"])
    assert [p.name for p in plan.steps] == ["g/a", "g/b"]
    with pytest.raises(UnknownStep, match="g/zzz"):
        _plan(prefix, [t.diamond()["d"]], only=["g/zzz"])


def test_one_hash_is_planned_once(prefix):
    a1, a2 = t.node("same/a"), t.node("same/a")
    b = Step("same/b", t.record, t.NodeConfig("b", inputs=(a1, a2)))
    plan = make_plan([b], StepStore(prefix))
    assert [p.name for p in plan.steps] == ["same/a", "same/b"]
