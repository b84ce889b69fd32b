"""Early cutoff: downstream steps of an upstream rebuilt with identical output are not rebuilt."""

from __future__ import annotations

import json

import pytest
from steps_for_tests import InProcessClient, NodeConfig, calls, node, noisy, noop, timed_step

from marin.execution.core.step import Step
from marin.execution.core.traits import StepTraits, step_function, volatile_patterns
from marin.execution.plan.model import Action
from marin.execution.run.outcome import Outcome
from marin.execution.run.runner import StepRunner
from marin.execution.store.manifest import differing_files, output_digest
from marin.execution.store.records import StepRecord
from rigging import filesystem as fs


def _runner(prefix: str, **kwargs) -> StepRunner:
    # The steps run in this process: early cutoff is the runner's decision, not its workers' (a
    # worker pool per runner was most of this file's CPU).
    return StepRunner(prefix=prefix, max_parallel=1, strict_env=False, client=InProcessClient(), **kwargs)


def _graph(counter: str, version: str = "v1", payload: str = "same") -> tuple[Step, Step]:
    up = timed_step("cut/up", version=version, payload=payload)
    down = node("cut/down", counter, up)
    return up, down


def test_version_bump_with_identical_output_does_not_rebuild_downstream(tmp_path, counter):
    prefix = str(tmp_path / "store")
    first = _runner(prefix).run([_graph(counter)[1]])
    assert first.ok and calls(counter)["cut.down"] == 1
    up, down = _graph(counter, version="v2")  # a refactor: same function output, new identity
    second = _runner(prefix).run([down])
    assert second.by_name("cut/up").outcome is Outcome.RAN
    reused = second.by_name("cut/down")
    assert reused.outcome is Outcome.REUSED, reused
    assert calls(counter)["cut.down"] == 1  # never ran again
    why = "; ".join(reused.reasons)
    assert "cut/up (digest " in why and "rebuilt with identical output" in why, why
    # The new identity is satisfied by a verified copy of the earlier output.
    old = first.by_name("cut/down").output_path
    assert reused.output_path != old and StepRecord(reused.output_path).is_done()
    assert fs.read_text(fs.join(reused.output_path, "out.txt")) == fs.read_text(fs.join(old, "out.txt"))
    provenance = StepRecord(reused.output_path).read_json(StepRecord(reused.output_path).provenance)
    assert provenance["realised_from"]["path"] == old and provenance["hash"] == reused.hash
    # On one local file system the files are links, not copies; the earlier build's records stay its own.
    import os

    assert os.stat(os.path.join(reused.output_path, "out.txt")).st_ino == os.stat(os.path.join(old, "out.txt")).st_ino
    assert StepRecord(old).read_json(StepRecord(old).provenance)["hash"] == first.by_name("cut/down").hash
    # It is in the done index like any published step, so the next plan needs no look at its records.
    from marin.execution.store.done_index import read_index

    assert f"cut/down-{reused.hash[:16]}" in read_index(prefix)
    # And from now on it is simply cached.
    third = _runner(prefix).run([down])
    assert third.by_name("cut/down").outcome is Outcome.CACHED


def test_plan_says_why_a_downstream_step_is_reused(tmp_path, counter):
    prefix = str(tmp_path / "store")
    assert _runner(prefix).run([_graph(counter)[1]]).ok
    up, down = _graph(counter, version="v2")
    assert _runner(prefix, only=["cut/up"]).run([down]).ok  # the upstream alone, rebuilt
    plan = _runner(prefix).plan([down])
    planned = {p.name: p for p in plan.steps}
    assert planned["cut/up"].action is Action.CACHED
    assert planned["cut/down"].action is Action.REUSE
    (reason,) = planned["cut/down"].reasons
    up_digest = StepRecord(planned["cut/up"].output_path).read_json(StepRecord(planned["cut/up"].output_path).success)["output_digest"]
    assert str(reason).startswith(f"reuse: cut/up (digest {up_digest[:12]}…) was rebuilt with identical output"), reason
    assert json.loads(plan.dumps())["steps"][1]["action"] == "reuse"
    result = _runner(prefix).run([down])
    assert result.by_name("cut/down").outcome is Outcome.REUSED and calls(counter)["cut.down"] == 1


def test_one_byte_of_difference_upstream_rebuilds_downstream(tmp_path, counter):
    prefix = str(tmp_path / "store")
    assert _runner(prefix).run([_graph(counter)[1]]).ok
    up, down = _graph(counter, version="v2", payload="samf")
    plan = _runner(prefix).plan([down])
    assert [p.action for p in plan.steps] == [Action.RUN, Action.RUN]
    result = _runner(prefix).run([down])
    assert result.by_name("cut/down").outcome is Outcome.RAN and calls(counter)["cut.down"] == 2
    assert any("upstream changed: cut/up" in r for r in result.by_name("cut/down").reasons)


def test_a_nondeterministic_step_built_twice_names_the_file_that_differs(tmp_path):
    prefix = str(tmp_path / "store")
    step = Step(name="nd/noisy", fn=noisy, config=NodeConfig(label="x"))
    assert _runner(prefix).run([step]).ok
    again = _runner(prefix, force=["nd/noisy"]).run([step]).by_name("nd/noisy")
    assert again.outcome is Outcome.RAN
    assert again.note is not None and "nondeterministic" in again.note and "noise.bin" in again.note, again
    assert "data.txt" not in again.note
    provenance = StepRecord(again.output_path).read_json(StepRecord(again.output_path).provenance)
    assert provenance["nondeterminism"]["files"] == ["noise.bin"]


def test_reuse_survives_a_second_checkout_with_the_first_prefix_as_a_cache(tmp_path, counter):
    first_prefix = str(tmp_path / "first")
    assert _runner(first_prefix).run([_graph(counter)[1]]).ok
    # Another checkout, its own empty prefix, the first one as a read-only cache, the refactor in.
    up, down = _graph(counter, version="v2")
    result = _runner(str(tmp_path / "second"), caches=[first_prefix]).run([down])
    assert result.by_name("cut/up").outcome is Outcome.RAN  # not in the cache: a new identity
    reused = result.by_name("cut/down")
    assert reused.outcome is Outcome.REUSED and calls(counter)["cut.down"] == 1
    assert reused.output_path.startswith(str(tmp_path / "second"))
    assert StepRecord(reused.output_path).is_done()


def test_output_digest_leaves_out_named_volatile_files_only():
    def manifest(**files: str) -> dict:
        return {"files": [{"path": p.replace("__", "/"), "size": 1, "sha256": h} for p, h in files.items()]}

    a = manifest(**{"final__params.npz": "1", "metrics.jsonl": "2", ".commits__part-00000.json": "3"})
    b = manifest(**{"final__params.npz": "1", "metrics.jsonl": "9", ".commits__part-00000.json": "8"})

    train = Step("train", step_function(StepTraits(volatile_files=("metrics.jsonl",)))(noop))
    volatile = volatile_patterns(train)
    assert output_digest(a, volatile) == output_digest(b, volatile)
    assert output_digest(a) != output_digest(b)  # metrics.jsonl counts unless the step names it
    assert differing_files(a, b, volatile) == []
    c = manifest(**{"final__params.npz": "7", "metrics.jsonl": "2"})
    assert differing_files(a, c, volatile) == ["final/params.npz"]


def test_volatile_files_must_be_a_tuple_of_patterns():
    with pytest.raises(TypeError, match=r"StepTraits.volatile_files must be a tuple of non-empty strings, "
                                        r"got 'metrics.jsonl'"):
        StepTraits(volatile_files="metrics.jsonl")  # type: ignore[arg-type]


def test_a_build_fetched_from_a_cache_keeps_its_realisation_record(tmp_path, counter):
    first_prefix = str(tmp_path / "first")
    built = _runner(first_prefix).run([_graph(counter)[1]]).by_name("cut/down")
    fetched = _runner(str(tmp_path / "second"), caches=[first_prefix]).run([_graph(counter)[1]]).by_name("cut/down")
    assert fetched.outcome is Outcome.CACHED and "fetched from" in (fetched.note or "")
    original, copy = (StepRecord(s.output_path).read_json(StepRecord(s.output_path).success) for s in (built, fetched))
    for key in ("output_digest", "realisation_key", "inputs"):
        assert copy[key] == original[key], key
