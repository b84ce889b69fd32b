"""One step state, owned by the store: what the runner writes and what plan, status and report read."""

from __future__ import annotations

import json

import pytest

from marin.execution.store.manifest import compute_manifest, remove_orphan_temporaries
from marin.execution.store.records import BuildState, StepRecord, manifest_digest
from rigging import filesystem as fs
from rigging.lease import Lease


@pytest.fixture
def record(tmp_path) -> StepRecord:
    return StepRecord(str(tmp_path / "step-0123456789abcdef"))


def test_no_record_is_missing(record):
    assert record.read_status().state is BuildState.MISSING


def test_running_with_the_lease_held_is_running_and_names_the_holder(record):
    lease = Lease.acquire(record.meta, ttl=30, holder="host:1:runner")
    record.write_status(BuildState.RUNNING, 2, "host:1:runner")
    status = record.read_status()
    assert (status.state, status.attempt, status.holder) == (BuildState.RUNNING, 2, "host:1:runner")
    lease.release()
    # The runner is gone without a word: the attempt was killed.
    assert record.read_status().state is BuildState.KILLED


def test_interrupted_reads_as_killed_and_failed_stays_failed_under_a_lease(record):
    record.write_status(BuildState.INTERRUPTED, 1, "me", error="interrupted by the runner")
    assert record.read_status().state is BuildState.KILLED
    record.write_status(BuildState.FAILED, 1, "me", error="ValueError: bad\nmore", traceback="tb")
    lease = Lease.acquire(record.meta, ttl=30, holder="other")
    status = record.read_status()
    lease.release()
    assert (status.state, status.error, status.record.traceback) == (BuildState.FAILED, "ValueError: bad\nmore", "tb")
    assert status.written is BuildState.FAILED


@pytest.mark.parametrize("state", [BuildState.MISSING, BuildState.KILLED])
def test_a_runner_writes_only_running_failed_or_interrupted(record, state):
    with pytest.raises(ValueError, match=state.value):
        record.write_status(state, 1, "me")


@pytest.mark.parametrize("body", ["not json", json.dumps({"state": "exploded"}), json.dumps(["running"])])
def test_a_damaged_status_record_reads_as_missing(record, body):
    fs.atomic_write(record.status, body)
    assert record.read_status().state is BuildState.MISSING


def test_publish_writes_the_success_record_once_with_the_manifest_digest(record):
    manifest = {"files": [{"path": "a", "size": 1, "sha256": "00"}], "total_bytes": 1}
    assert record.publish("g/a", "f" * 64, manifest)
    assert record.is_done()
    success = record.read_json(record.success)
    assert success["manifest_sha256"] == manifest_digest(manifest) and success["hash"] == "f" * 64
    assert not record.publish("g/a", "f" * 64, manifest)
    other = {"files": [{"path": "a", "size": 1, "sha256": "01"}]}
    assert manifest_digest(other) != manifest_digest(manifest)


def _output_with_orphans(root) -> tuple[str, list[str]]:
    out = root / "step-0123456789abcdef"
    orphans = [f".tmp-{'a' * 32}-model.bin", f"shards/.tmp-{'b' * 32}-part-0.array_record"]
    for rel in ["model.bin", "shards/part-0.array_record", ".tmp-not-ours.txt", ".marin/success.json",
                f".marin/.tmp-{'c' * 32}-status.json", *orphans]:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(rel)
    return str(out), orphans


def test_orphaned_temporaries_are_deleted_and_never_in_the_manifest_and_records_are_left_alone(tmp_path):
    out, orphans = _output_with_orphans(tmp_path / "a")
    manifest = compute_manifest(out)
    assert sorted(e["path"] for e in manifest["files"]) == [".tmp-not-ours.txt", "model.bin", "shards/part-0.array_record"]
    left = sorted(rel for rel, _size in fs.walk_files(out))
    assert left == sorted([".marin/.tmp-" + "c" * 32 + "-status.json", ".marin/success.json", ".tmp-not-ours.txt",
                           "model.bin", "shards/part-0.array_record"])
    out, orphans = _output_with_orphans(tmp_path / "b")
    assert sorted(remove_orphan_temporaries(out)) == sorted(orphans)
    assert sorted(rel for rel, _size in fs.walk_files(out)) == left
