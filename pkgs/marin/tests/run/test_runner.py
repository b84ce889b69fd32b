"""The runner, on every store: reruns do nothing, changes rebuild exactly what they invalidate,
failures stay contained and are recorded, and a runner that lost its lease never publishes."""

from __future__ import annotations

import json

import pytest
import steps_for_tests as t

from marin.execution.core.step import Step
from marin.execution.run.outcome import Outcome, RunResult
from marin.execution.run.runner import StepRunner
from marin.execution.store.records import StepRecord
from rigging import filesystem as fs
from rigging.lease import current_lease


def _runner(prefix: str, client=None, **kwargs) -> StepRunner:
    kwargs.setdefault("max_parallel", 2)
    return StepRunner(prefix=prefix, client=client, lease_ttl=kwargs.pop("lease_ttl", 10.0),
                      poll_interval=0.02, **kwargs)


def _outcomes(result: RunResult) -> dict[str, Outcome]:
    return {s.name: s.outcome for s in result.steps}


def _targets(g: dict[str, Step]) -> list[Step]:
    return [g["d"], g["e"]]


def test_rerun_does_nothing(store, counter):
    prefix, client = store
    g = t.diamond(counter)
    first = _runner(prefix, client).run(_targets(g))
    assert first.ok, [(s.name, s.error) for s in first.steps]
    assert set(_outcomes(first).values()) == {Outcome.RAN}
    assert t.calls(counter) == {"g.a": 1, "g.b": 1, "g.c": 1, "g.d": 1, "g.e": 1}
    # The data flowed through the resolved placeholders.
    d_out = json.loads(fs.read_text(fs.join(first.by_name("g/d").output_path, "out.txt")))
    assert [json.loads(x)["label"] for x in d_out["inputs"]] == ["g.b", "g.c"]

    # A fresh graph object with the same definitions: everything cached, nothing called.
    second = _runner(prefix, client).run(_targets(t.diamond(counter)))
    assert set(_outcomes(second).values()) == {Outcome.CACHED}
    assert [s.output_path for s in second.steps] == [s.output_path for s in first.steps]
    assert t.calls(counter) == {"g.a": 1, "g.b": 1, "g.c": 1, "g.d": 1, "g.e": 1}


@pytest.mark.parametrize("store", ["local", "memory"], indirect=True)
def test_changing_one_leaf_reruns_exactly_it_and_its_dependents(store, counter):
    prefix, client = store
    before = _runner(prefix, client).run(_targets(t.diamond(counter)))
    assert before.ok
    after = _runner(prefix, client).run(_targets(t.diamond(counter, b={"value": 5})))
    assert _outcomes(after) == {"g/a": Outcome.CACHED, "g/b": Outcome.RAN, "g/c": Outcome.CACHED,
                                "g/d": Outcome.RAN, "g/e": Outcome.CACHED}
    assert t.calls(counter) == {"g.a": 1, "g.b": 2, "g.c": 1, "g.d": 2, "g.e": 1}
    for name in ("g/a", "g/c", "g/e"):
        assert after.by_name(name).output_path == before.by_name(name).output_path
    for name in ("g/b", "g/d"):
        assert after.by_name(name).output_path != before.by_name(name).output_path
        # The old build stays where it was.
        assert StepRecord(before.by_name(name).output_path).is_done()


def test_a_failing_step_is_recorded_and_only_its_dependents_are_skipped(store, counter):
    prefix, client = store
    g = t.diamond(counter, b={"fail": True})
    result = _runner(prefix, client).run(_targets(g))
    assert not result.ok
    assert _outcomes(result) == {"g/a": Outcome.RAN, "g/b": Outcome.FAILED, "g/c": Outcome.RAN,
                                 "g/d": Outcome.UPSTREAM_FAILED, "g/e": Outcome.RAN}
    assert [s.name for s in result.failed] == ["g/b"]
    assert "d" not in "".join(t.calls(counter)).replace("g.", "")  # g/d never ran
    failed = result.by_name("g/b")
    assert "failed on purpose" in failed.error
    assert "upstream failed: g/b" in result.by_name("g/d").error

    record = StepRecord(failed.output_path)
    assert not record.is_done()
    status = record.read_json(record.status)
    assert status["state"] == "failed"
    assert "failed on purpose" in status["error"]
    assert "Traceback" in status["traceback"] and "RuntimeError" in status["traceback"]
    if client is None:  # steps in their own processes: their output is in the step's log
        assert failed.log_path == record.log
        assert "failed on purpose" in fs.read_text(failed.log_path)
    assert not StepRecord(result.by_name("g/d").output_path).is_done()

    # Fixed, it runs again; what succeeded before stays cached.
    fixed = _runner(prefix, client).run(_targets(t.diamond(counter)))
    assert fixed.ok
    assert _outcomes(fixed)["g/a"] is Outcome.CACHED and _outcomes(fixed)["g/e"] is Outcome.CACHED
    assert _outcomes(fixed)["g/b"] is Outcome.RAN


@pytest.mark.parametrize("store", ["local", "memory"], indirect=True)
def test_success_record_provenance_and_manifest(store, counter, monkeypatch):
    from rigging.secrets import Secret

    prefix, client = store
    monkeypatch.setenv("HF_TEST_TOKEN", "hunter2-value")
    a = t.node("p/a", counter, value=3, token=Secret("HF_TEST_TOKEN"))
    b = t.node("p/b", counter, a)
    result = _runner(prefix, client).run([b])
    assert result.ok
    rec_a = StepRecord(result.by_name("p/a").output_path)
    rec_b = StepRecord(result.by_name("p/b").output_path)
    for rec in (rec_a, rec_b):
        assert rec.is_done()
        assert rec.output_path.endswith("-" + rec.read_json(rec.success)["hash"][:16])
    prov = rec_b.read_json(rec_b.provenance)
    assert prov["name"] == "p/b" and prov["hash"] == b.hash and prov["version"] == "v1"
    assert prov["fn"] == "steps_for_tests:record"
    assert prov["config"]["inputs"] == [rec_a.output_path]
    assert prov["dependencies"] == [{"name": "p/a", "hash": a.hash, "path": rec_a.output_path}]
    env = prov["environment"]
    assert env["python"] and "uv_lock_sha256" in env and "git_commit" in env and env["host"]
    assert prov["attempts"] == 1 and prov["finished_at"] >= prov["started_at"]
    manifest = rec_b.read_json(rec_b.manifest)
    assert [f["path"] for f in manifest["files"]] == ["out.txt"]
    # The secret's value is never written anywhere in the step's records.
    prov_a = fs.read_text(rec_a.provenance)
    assert "<secret:HF_TEST_TOKEN>" in prov_a
    for name in fs.listdir(rec_a.meta):
        assert "hunter2" not in fs.read_text(fs.join(rec_a.meta, name)), name


@pytest.mark.parametrize("store", ["local", "memory"], indirect=True)
def test_dry_run_runs_nothing(store, counter):
    prefix, client = store
    result = _runner(prefix, client, dry_run=True).run(_targets(t.diamond(counter)))
    assert set(_outcomes(result).values()) == {Outcome.WOULD_RUN}
    assert t.calls(counter) == {}
    assert not fs.exists(result.by_name("g/a").output_path)


def test_force_rebuilds_the_matching_steps_only(tmp_path, counter):
    prefix = str(tmp_path / "store")
    assert _runner(prefix).run(_targets(t.diamond(counter))).ok
    result = _runner(prefix, force=["g/c"]).run(_targets(t.diamond(counter)))
    assert result.ok
    assert _outcomes(result)["g/c"] is Outcome.RAN
    assert t.calls(counter)["g.c"] == 2
    # Same hash, same output: nothing downstream is invalidated by a forced rebuild.
    assert t.calls(counter)["g.a"] == 1 and t.calls(counter)["g.d"] == 1
    rec = StepRecord(result.by_name("g/c").output_path)
    assert rec.read_json(rec.provenance)["reasons"] == [{"kind": "forced", "detail": "--force"}]


def test_only_builds_the_matching_steps_and_their_dependencies(tmp_path, counter):
    result = _runner(str(tmp_path / "store"), only=["g/b"]).run(_targets(t.diamond(counter)))
    assert result.ok
    assert t.calls(counter) == {"g.a": 1, "g.b": 1}
    assert {s.name for s in result.steps} == {"g/a", "g/b"}


def test_a_runner_whose_lease_was_taken_does_not_publish(tmp_path, counter):
    # The step's first call hands the lease to a runner "elsewhere" (expiring in 0.8 s) and
    # returns. The runner must not publish that attempt; once the thief's lease expires it
    # takes over and runs the step again, which then sees no success record.
    step = Step("lease/stolen", t.steal_lease, t.NodeConfig("stolen", sleep=0.8, counter_dir=counter))
    result = _runner(str(tmp_path / "store"), lease_ttl=1.0).run([step])
    assert result.ok, result.steps
    assert _outcomes(result) == {"lease/stolen": Outcome.RAN}
    assert t.calls(counter)["stolen"] == 2
    out = json.loads(fs.read_text(fs.join(result.steps[0].output_path, "out.txt")))
    assert out == {"call": 2, "published_before": False}
    rec = StepRecord(result.steps[0].output_path)
    assert rec.is_done()
    # Cleared after publishing: the runner's first lease (1), the thief's (2) and its own (3, kept,
    # released, so that the folder never hands out a number twice).
    assert [n for n in fs.listdir(rec.meta) if n.startswith("lease-")] == ["lease-00000003.json"]
    info = current_lease(rec.meta)
    assert info is not None and info.token == 3 and info.released and not info.live()


def test_memory_prefix_with_the_default_client_keeps_outputs(memory_prefix, counter):
    """memory:// lives in one process: the runner must not lose what its steps write there."""
    g = t.diamond(counter)
    result = _runner(memory_prefix).run(_targets(g))
    assert result.ok, [(s.name, s.error) for s in result.steps]
    assert fs.exists(fs.join(result.by_name("g/d").output_path, "out.txt"))


@pytest.mark.parametrize("max_parallel", [1, 4])
def test_independent_steps_all_run_with_any_parallelism(tmp_path, counter, max_parallel):
    steps = [t.node(f"wide/s{i}", counter) for i in range(4)]
    result = _runner(str(tmp_path / "store"), max_parallel=max_parallel).run(steps)
    assert result.ok and t.calls(counter) == {f"wide.s{i}": 1 for i in range(4)}
