"""One walker over configs: hashing, the plan and resolution agree on every container kind."""

from __future__ import annotations

import json

import steps_for_tests as t

from marin.execution.core.encoding import config_to_json, flatten_config
from marin.execution.core.graph import dependencies_of
from marin.execution.core.hashing import hash_graph
from marin.execution.core.step import Step
from marin.execution.core.walk import iter_placeholders, with_real_paths
from marin.execution.plan.model import ReasonKind
from marin.execution.run.runner import StepRunner
from rigging import filesystem as fs

KINDS = ("list", "tuple", "dict", "set", "frozenset", "dataclass")


def _graph(changed: str | None = None) -> tuple[dict[str, Step], Step]:
    upstream = {k: t.node(f"up/{k}", value=1 if k == changed else 0) for k in KINDS}
    return upstream, Step(name="down/all", fn=t.describe_containers, config=t.every_container(upstream))


def _runner(prefix: str) -> StepRunner:
    return StepRunner(prefix=prefix, max_parallel=2, client=t.InProcessClient(), poll_interval=0.01)


def test_every_container_kind_is_a_dependency_in_the_hash():
    upstream, down = _graph()
    assert {d.name for d in dependencies_of(down)} == {s.name for s in upstream.values()}
    base = hash_graph([down])[id(down)]
    for kind in KINDS:
        _, other = _graph(changed=kind)
        assert hash_graph([other])[id(other)] != base, f"a change upstream of in_{kind} kept the hash"


def test_resolution_replaces_the_placeholder_in_every_container_kind_and_keeps_the_kind():
    upstream, down = _graph()
    paths = {id(s): f"/store/{s.name}" for s in upstream.values()}
    real = with_real_paths(down.config, paths)
    assert next(iter_placeholders(real), None) is None
    assert real.in_list == ["/store/up/list"] and real.in_tuple == ("/store/up/tuple",)
    assert real.in_dict == {"k": "/store/up/dict"} and real.in_set == {"/store/up/set"}
    assert type(real.in_frozenset) is frozenset and real.in_frozenset == frozenset({"/store/up/frozenset"})
    assert real.in_dataclass == t.Inner("/store/up/dataclass")
    provenance = config_to_json(down.config, paths)
    assert provenance["in_frozenset"] == ["/store/up/frozenset"] and provenance["in_dataclass"]["path"] == "/store/up/dataclass"


def test_fn_receives_real_paths_and_the_plan_names_the_upstream_that_changed(memory_prefix):
    upstream, down = _graph()
    result = _runner(memory_prefix).run([down])
    assert result.ok, [o.error for o in result.steps]
    received = json.loads(fs.read_text(fs.join(result.by_name("down/all").output_path, "received.json")))
    for kind in KINDS:
        container, values = received[f"in_{kind}"]
        expected_type = "Inner" if kind == "dataclass" else kind
        assert container == expected_type
        assert values == [fs.join(result.by_name(f"up/{kind}").output_path)], (kind, values)

    keys: set[str] = set()
    flatten_config(down.config, hash_graph([down]), dependency_keys=keys)
    assert keys == {"in_list", "in_tuple", "in_dict.k", "in_set", "in_frozenset", "in_dataclass.path"}
    for kind in KINDS:
        _, changed = _graph(changed=kind)
        plan = {p.name: p for p in _runner(memory_prefix).plan([changed]).steps}
        reasons = plan["down/all"].reasons
        assert [r.kind for r in reasons] == [ReasonKind.UPSTREAM_CHANGED], (kind, reasons)
        assert reasons[0].detail == f"up/{kind}"
