"""One graph, one name per step: the plan names steps that share a name but not an identity (with
where each was defined and what differs), a run refuses them before writing anything, and
Marin's executor steps are only warned about. Nothing here builds a step."""

from __future__ import annotations

import logging
import os
import types
from dataclasses import dataclass

import pytest
import steps_for_tests as t

from marin.execution.compat.executor import ExecutorStep, versioned
from marin.execution.core.lazy import StepHandle
from marin.execution.core.sites import site_of
from marin.execution.core.step import Step
from marin.execution.plan.clashes import NameClashes
from marin.execution.plan.explain import display_path
from marin.execution.plan.make import make_plan
from marin.execution.run.runner import StepRunner
from marin.execution.store.store import StepStore

HERE = os.path.abspath(__file__)


def _line_of(marker: str) -> int:
    """The line of this file that holds ``marker`` (in a comment), so that no test pins a number."""
    with open(HERE, encoding="utf-8") as f:
        return next(i for i, line in enumerate(f, 1) if line.rstrip().endswith(f"# {marker}"))


def _plan(tmp_path, targets):
    return make_plan(targets, StepStore(str(tmp_path / "store")))


class Node(StepHandle, fn=t.record):
    """A handle of this project over ``steps_for_tests.record``."""


@dataclass(frozen=True)
class Seeded:
    seed: int


def marin_fn(config: Seeded) -> None:
    """A Marin ``fn(config)``; never called here."""


def test_the_same_step_reached_twice_is_one_step_and_no_clash(tmp_path):
    shared = Node("g/shared", t.NodeConfig("s"))
    first = Step("g/a", t.record, t.NodeConfig("a", value=1))
    again = Step("g/a", t.record, t.NodeConfig("a", value=1))  # made on another line: the same identity
    top = Step("g/top", t.record, t.NodeConfig("top", inputs=(first, again, shared, shared)))
    plan = _plan(tmp_path, [top, Node("g/other", t.NodeConfig("o", inputs=(shared,)))])
    assert plan.name_clashes == ()
    assert sorted(p.name for p in plan.steps) == ["g/a", "g/other", "g/shared", "g/top"]
    assert first.hash == again.hash and site_of(first) != site_of(again)  # where it was made is not hashed


def test_two_steps_of_one_name_are_reported_with_both_sites_and_what_differs(tmp_path):
    a = Step("tok/x", t.record, t.NodeConfig("x", value=0))  # clash-a
    b = Node("tok/x", t.NodeConfig("x", value=1, extra={"seed": 3}), version="v2")  # clash-b
    plan = _plan(tmp_path, [Step("train/m", t.record, t.NodeConfig("m", inputs=(a, b)))])
    (clash,) = plan.name_clashes
    assert clash.name == "tok/x" and not clash.allowed
    assert [d.site for d in clash.definitions] == [(HERE, _line_of("clash-a")), (HERE, _line_of("clash-b"))]
    assert clash.differences == (("version: v1 → v2", "extra: none → seed=3", "value: 0 → 1"),)
    shown = display_path(HERE)  # relative to the working folder when under it
    assert str(clash) == (f"two steps named tok/x with different identities: {shown}:{_line_of('clash-a')} "
                          f"(hash {a.hash[:8]}) and {shown}:{_line_of('clash-b')} (hash {b.lower().hash[:8]}): "
                          "version: v1 → v2, extra: none → seed=3, value: 0 → 1")
    assert plan.to_json()["name_clashes"][0]["definitions"][1] == {
        "file": HERE, "line": _line_of("clash-b"), "hash": b.lower().hash}


def test_three_of_one_name_and_a_clash_downstream_name_the_other_builds(tmp_path):
    tok = [Step("tok/x", t.record, t.NodeConfig("x", value=v)) for v in (0, 1, 2)]
    models = [Step("train/m", t.record, t.NodeConfig("m", inputs=(d,))) for d in tok[:2]]
    clashes = {c.name: c for c in _plan(tmp_path, [*models, tok[2]]).name_clashes}
    assert str(clashes["tok/x"]).startswith("3 steps named tok/x with different identities: ")
    assert clashes["tok/x"].differences == (("value: 0 → 1",), ("value: 0 → 2",))
    # Inputs are named by their step's name and hash, not by an opaque digest.
    assert clashes["train/m"].differences == ((f"inputs: [tok/x-{tok[0].hash[:8]}] → [tok/x-{tok[1].hash[:8]}]",),)


def test_a_run_refuses_a_clash_before_writing_anything(tmp_path):
    prefix = tmp_path / "store"
    a, b = (Step("tok/x", t.record, t.NodeConfig("x", value=v)) for v in (0, 1))
    with pytest.raises(NameClashes, match=r"^two steps named tok/x with different identities: .*value: 0 → 1$"):
        StepRunner(prefix=str(prefix), client=t.InProcessClient()).run([a, b])
    assert not prefix.exists()


def test_marin_executor_steps_are_a_warning_unless_a_step_of_this_project_shares_the_name(tmp_path, caplog):
    a = ExecutorStep(name="tok/x", fn=marin_fn, config=Seeded(seed=versioned(0)))  # executor-a
    b = ExecutorStep(name="tok/x", fn=marin_fn, config=Seeded(seed=versioned(1)))
    (clash,) = _plan(tmp_path, [a, b]).name_clashes
    assert clash.allowed and clash.differences == (("config.seed: 0 → 1",),)
    assert clash.definitions[0].site == (HERE, _line_of("executor-a"))
    runner = StepRunner(prefix=str(tmp_path / "store"), client=t.InProcessClient(), dry_run=True)
    with caplog.at_level(logging.WARNING):
        runner.run([a, b])
    assert any(str(clash) in r.getMessage() for r in caplog.records)
    (mixed,) = _plan(tmp_path, [a, Step("tok/x", t.record, t.NodeConfig("x"))]).name_clashes
    assert not mixed.allowed


def test_a_copy_made_while_lowering_is_defined_where_the_original_was(tmp_path):
    held = ExecutorStep(name="data/raw", fn=marin_fn, config=Seeded(seed=1))  # held-by-value
    # A step held by value in another's config is copied when that one is lowered.
    reader = ExecutorStep(name="data/read", fn=marin_fn, config={"input": held})
    plan = _plan(tmp_path, [reader])
    raw = next(p.step for p in plan.steps if p.name == "data/raw")
    assert site_of(raw) == (HERE, _line_of("held-by-value"))


def test_a_handle_made_by_a_module_of_helpers_is_defined_where_the_helper_was_called():
    helpers = types.ModuleType("my_helpers")
    exec(compile("__marin_helpers__ = True\n"  # noqa: S102 - a module of helpers, as experiments.defaults
                 "def tokenize(name, node):\n"
                 "    return node(name, None)\n", "/elsewhere/my_helpers.py", "exec"), helpers.__dict__)
    handle = helpers.tokenize("tok/y", Node)  # helper-call
    assert site_of(handle) == site_of(handle.lower()) == (HERE, _line_of("helper-call"))
