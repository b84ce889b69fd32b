"""One walk of a config serves hashing twice: its dependencies (before their hashes are known) and
its encoding (after). The text it gives is the text of encoding the config anew with the hashes."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

import pytest
import steps_for_tests as t

from marin.execution.core.encoding import config_walk, encode
from marin.execution.core.errors import UnserializableConfig
from marin.execution.core.graph import collect_graph
from marin.execution.core.hashing import KEY_SCHEMA, hash_graph, step_key
from marin.execution.core.identity import fn_identity
from marin.execution.core.placeholders import output_path_of
from marin.execution.core.step import Step
from marin.execution.core.walk import iter_placeholders
from rigging.fields import unhashed_field


class Key(enum.Enum):
    A = "a"
    B = "b"


@dataclass(frozen=True)
class Mixed:
    """Placeholders where order depends on hashes (sets), beside ones where it does not."""

    several: frozenset
    nested: tuple
    by_enum: dict
    plain: list
    not_hashed: Any = unhashed_field(default=None)


def _upstream(n: int) -> list[Step]:
    return [Step(name=f"up/s{i}", fn=t.noop, config={"i": i}) for i in range(n)]


def _mixed() -> Step:
    up = _upstream(6)
    p = [output_path_of(s) for s in up]
    config = Mixed(several=frozenset(p[:4]), nested=({frozenset({p[4], p[0]}), "x"},),
                   by_enum={Key.B: p[1], Key.A: [p[2], 3.5]}, plain=[p[3], None, b"\x00"],
                   not_hashed=output_path_of(up[5], "only/a/dependency"))
    return Step(name="down/mixed", fn=t.noop, config=config)


def _reference_key(step: Step, hashes: dict[int, str]) -> str:
    """The key as it was made before the walk was shared: the config encoded with its hashes."""
    deps = []
    for dep, _ in iter_placeholders(step.config):
        if dep not in deps:
            deps.append(dep)
    key = [KEY_SCHEMA, step.name, fn_identity(step.fn), step.version, encode(step.config, hashes, "c"),
           sorted(hashes[id(d)] for d in deps)]
    return json.dumps(key, separators=(",", ":"), ensure_ascii=False)


def test_the_shared_walk_gives_the_text_of_encoding_anew():
    target = _mixed()
    hashes = hash_graph([target])
    assert step_key(target, hashes) == _reference_key(target, hashes)


def test_sets_of_dependencies_are_ordered_by_their_hashes_whatever_hashes_are_given():
    target = _mixed()
    graph = collect_graph([target])
    # Other digests (as a realisation key names inputs by their outputs' digests): another order.
    for salt in ("a", "b", "c"):
        other = {id(s): f"{salt}{i:063x}"[::-1] for i, s in enumerate(graph)}
        assert step_key(target, other) == _reference_key(target, other)


def test_dependencies_are_found_in_walk_order_unhashed_fields_included():
    target = _mixed()
    walked = list(dict.fromkeys(id(s) for s, _ in iter_placeholders(target.config)))
    assert [id(s) for s in config_walk(target).deps] == walked
    assert "up/s5" in {s.name for s in config_walk(target).deps}
    assert "only/a/dependency" not in step_key(target, hash_graph([target]))


def test_a_value_that_cannot_be_encoded_fails_the_hash_not_the_dependency_walk():
    up = _upstream(1)[0]
    bad = Step(name="down/bad", fn=t.noop, config={"prev": output_path_of(up), "weights": object(), 1.5: "key"})
    assert config_walk(bad).deps == [up]  # --only can still name the graph's steps
    with pytest.raises(UnserializableConfig, match=r"down/bad\.config\['weights'\]: value of type builtins\.object"):
        hash_graph([bad])
