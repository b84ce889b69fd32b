"""Step identity: what enters the hash, what stays out, and that it is stable."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
import steps_for_tests as t
from steps_for_tests import Color, NodeConfig, node, record

from marin.execution.core.errors import UnserializableConfig
from marin.execution.core.graph import collect_graph
from marin.execution.core.hashing import hash_graph
from marin.execution.plan.make import make_plan
from marin.execution.plan.model import Action
from marin.execution.step import InvalidStep, Step, output_path_of
from marin.execution.store.store import StepStore
from rigging.secrets import Secret


def _hashes(steps: dict[str, Step]) -> dict[str, str]:
    return {k: s.hash for k, s in steps.items()}


def test_hash_is_a_long_hex_digest_and_output_name_uses_16_digits():
    a = node("g/a")
    assert len(a.hash) == 64 and int(a.hash, 16) >= 0
    assert a.output_name == f"g/a-{a.hash[:16]}"


def test_hashes_are_stable_across_processes(tmp_path):
    here = _hashes(t.diamond())
    code = (
        "import json, steps_for_tests as t\n"
        "print(json.dumps({k: s.hash for k, s in t.diamond().items()}))\n"
    )
    # Another process, another working folder: nothing about where or when may enter the hash.
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": f"{t.IMPORT_DIR}:{t.WORKSPACE}", "PATH": "/usr/bin:/bin"})
    assert json.loads(out.stdout) == here


def test_hashes_do_not_depend_on_the_prefix(tmp_path):
    g = t.diamond()
    plan_a = make_plan([g["d"]], StepStore(str(tmp_path / "one")))
    plan_b = make_plan([g["d"]], StepStore("memory://elsewhere/deep"))
    assert [p.hash for p in plan_a.steps] == [p.hash for p in plan_b.steps]
    for pa, pb in zip(plan_a.steps, plan_b.steps, strict=True):
        assert pa.output_path == str(tmp_path / "one" / pa.output_name)
        assert pb.output_path == f"memory://elsewhere/deep/{pb.output_name}"


def test_equal_steps_built_twice_hash_the_same():
    assert _hashes(t.diamond()) == _hashes(t.diamond())


BASE = dict(label="x", value=1, sleep=0.0, fail=False, extra={"k": [1, 2.5, "s"]}, token=Secret("TOKEN_A"))


@pytest.mark.parametrize(
    "change",
    [
        {"label": "y"},
        {"value": 2},
        {"sleep": 0.5},
        {"fail": True},
        {"extra": {"k": [1, 2.5, "t"]}},
        {"extra": {"k": [1, 2.5]}},
        {"extra": {"k": (1, 2.5, "s")}},  # a tuple is not a list
        {"extra": {"k": [1, 2.0, "s"]}},
        {"extra": {"k": [True, 2.5, "s"]}},  # True is not 1
        {"token": Secret("TOKEN_B")},  # a secret's name is part of the identity
        {"token": None},
    ],
    ids=lambda c: next(iter(c)) + "=" + repr(next(iter(c.values())))[:20],
)
def test_every_hashed_config_field_changes_the_hash(change):
    base = Step("h/x", record, NodeConfig(**BASE))
    changed = Step("h/x", record, NodeConfig(**{**BASE, **change}))
    assert base.hash != changed.hash


def test_name_fn_and_version_change_the_hash():
    cfg = NodeConfig(**BASE)
    base = Step("h/x", record, cfg)
    assert Step("h/y", record, cfg).hash != base.hash
    assert Step("h/x", t.noop, cfg).hash != base.hash
    assert Step("h/x", record, cfg, version="v2").hash != base.hash


def test_a_dependency_enters_by_hash_so_upstream_changes_propagate():
    g1 = t.diamond()
    g2 = t.diamond(a={"value": 7})
    for k in "abcd":
        assert g1[k].hash != g2[k].hash, k
    assert g1["e"].hash == g2["e"].hash
    # The sub path of a placeholder is part of the identity too.
    a = g1["a"]
    s1 = Step("h/p", record, NodeConfig("p", extra=output_path_of(a, "x.txt")))
    s2 = Step("h/p", record, NodeConfig("p", extra=output_path_of(a, "y.txt")))
    assert s1.hash != s2.hash


def test_unhashed_fields_resources_and_secret_values_do_not_change_the_hash(monkeypatch):
    base = Step("h/x", record, NodeConfig(**BASE))
    same = [
        Step("h/x", record, NodeConfig(**BASE, counter_dir="/somewhere/else", log_every=1000)),
        Step("h/x", record, NodeConfig(**BASE), resources={"cpu": 8, "tpu": "v5e-16"}),
        Step("h/x", record, NodeConfig(**{**BASE, "token": Secret("TOKEN_A", "a value")})),
        Step("h/x", record, NodeConfig(**{**BASE, "token": Secret("TOKEN_A", "another value")})),
    ]
    monkeypatch.setenv("TOKEN_A", "from the environment")
    same.append(Step("h/x", record, NodeConfig(**BASE)))
    for s in same:
        assert s.hash == base.hash, s


def test_dict_order_does_not_change_the_hash():
    one = Step("h/x", record, NodeConfig("x", extra={"a": 1, "b": {"c": 2, "d": 3}}))
    two = Step("h/x", record, NodeConfig("x", extra={"b": {"d": 3, "c": 2}, "a": 1}))
    assert one.hash == two.hash
    assert Step("h/x", record, {"p": 1, "q": 2}).hash == Step("h/x", record, {"q": 2, "p": 1}).hash
    assert Step("h/x", record, {"s": {3, 1, 2}}).hash == Step("h/x", record, {"s": {2, 3, 1}}).hash


# Computed once and written down: an accidental change of the key schema (field order, type
# tags, what enters the key) must show up here, not silently invalidate every cached output.
PINNED = {
    "pin/plain": "ead9cbd7616904ab5d2c4aa0ab056a5b2d7fd65818eb8524efceac914b359063",
    "pin/dataclass": "04c2f68ebf168f8b96bc750311f8cb25f055d3f4b9d7bc45b47c0a4629113ddf",
    "pin/dependent": "c7657bc540d6d85ab47bef183bc0d8fe582486984994c19eb9eb03a6e40fe802",
}


def _pinned_steps() -> dict[str, Step]:
    plain = Step("pin/plain", record, {"n": 3, "x": 0.25, "name": "abc", "on": True, "none": None,
                                       "color": Color.BLUE, "items": [1, "two", (3.0,)]})
    dc = Step("pin/dataclass", record, NodeConfig(label="pin", value=42, extra={"lr": 6e-4},
                                                  token=Secret("HF_TOKEN")), version="v3")
    dependent = Step("pin/dependent", record, NodeConfig(label="dep", inputs=(output_path_of(dc),),
                                                         extra=output_path_of(plain, "sub/file.txt")))
    return {s.name: s for s in (plain, dc, dependent)}


def test_pinned_digests():
    got = {name: s.hash for name, s in _pinned_steps().items()}
    assert got == PINNED


def test_unserializable_config_value_names_the_field():
    with pytest.raises(UnserializableConfig, match=r"extra\['bad'\]") as info:
        _ = Step("h/bad", record, NodeConfig("x", extra={"bad": object()})).hash
    assert "object" in str(info.value)


def test_unsafe_step_names_are_rejected():
    for bad in ("../escape", "a/../b", "/abs", "", "a//b", "a/./b"):
        with pytest.raises(InvalidStep):
            Step(bad, record, None)


def test_a_lambda_or_local_function_is_rejected():
    def local(config, output_path):
        pass

    with pytest.raises(InvalidStep, match="module-level"):
        Step("h/x", local, None)
    with pytest.raises(InvalidStep, match="module-level"):
        Step("h/x", lambda c, p: None, None)


def test_a_dependency_cycle_is_reported():
    @dataclasses.dataclass
    class Mutable:
        ref: object = None

    cfg = Mutable()
    a = Step("cyc/a", record, cfg)
    b = Step("cyc/b", record, {"x": output_path_of(a)})
    cfg.ref = output_path_of(b)
    with pytest.raises(InvalidStep, match="cycle"):
        hash_graph([b])


def test_a_chain_of_10000_steps_hashes_and_plans_without_recursion(tmp_path):
    steps = t.chain(10_000)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        graph = collect_graph([steps[-1]])
        hashes = hash_graph([steps[-1]])
        plan = make_plan([steps[-1]], StepStore(str(tmp_path / "store")))
    finally:
        sys.setrecursionlimit(limit)
    assert len(graph) == 10_000 and graph[0] is steps[0]
    assert len(set(hashes.values())) == 10_000
    assert len(plan.steps) == 10_000
    assert all(p.action is Action.RUN for p in plan.steps)
    assert plan.steps[-1].reasons[0].kind.name == "NEW"


def test_unhashed_field_lives_in_rigging_and_marin_re_exports_it():
    import rigging
    import rigging.fields
    from marin.execution import step

    assert step.unhashed_field is rigging.fields.unhashed_field is rigging.unhashed_field
    assert step.UNHASHED == rigging.fields.UNHASHED


def test_a_step_function_with_traits_keeps_the_identity_and_hash_of_its_function():
    import pickle

    from marin.execution.core.traits import StepTraits, step_function, traits_of

    traits = StepTraits(scale_fields=("value",))
    wrapped = step_function(traits)(t.noop)
    assert Step("id/x", wrapped, {"a": 1}).hash == Step("id/x", t.noop, {"a": 1}).hash
    assert traits_of(wrapped) is traits and traits_of(t.noop) == StepTraits()
    # A module-level step function with traits travels to workers by reference, as a function does.
    assert pickle.loads(pickle.dumps(t.timed)) is t.timed


def test_a_field_added_to_a_config_class_keeps_the_hashes_of_configs_that_leave_it_at_its_default():
    from levanter.config import TrainerConfig
    from marin.execution.core.encoding import encode, flatten_config

    plain = TrainerConfig()
    encoded = json.dumps(encode(plain, {}))
    # The fields added this round are in the encoding only when set, so earlier builds keep their hashes.
    assert "eval_tasks" not in encoded and "eval_task_limit" not in encoded
    assert "eval_tasks" not in flatten_config(plain, {})
    tasked = TrainerConfig(eval_tasks=("story_qa",))
    assert "eval_tasks" in json.dumps(encode(tasked, {})) and flatten_config(tasked, {})["eval_tasks"]
    assert encode(tasked, {}) != encode(plain, {})
