"""The store's records (status, success, provenance) as typed values: round trips, today's
unversioned records, keys this code does not know, damaged records."""

from __future__ import annotations

import json

import pytest

from marin.execution.store.records import (
    RECORD_FORMAT,
    BuildState,
    Dependency,
    Provenance,
    RealisedFrom,
    StatusRecord,
    StepRecord,
    SuccessRecord,
)
from rigging import filesystem as fs

APART = ".attempts/00000003"

# Records exactly as the code before versioned records wrote them (no "format" field).
STATUS_V0 = {"state": "failed", "attempt": 2, "holder": "host:12:runner", "time": 1700000000.5,
             "worker": "host:4242:17.5", "data": APART, "error": "ValueError: bad", "traceback": "Traceback ..."}
SUCCESS_V0 = {"hash": "ab" * 32, "name": "g/a", "finished_at": 1700000001.25, "manifest_sha256": "cd" * 32,
              "output_digest": "ef" * 32, "realisation_key": "01" * 32,
              "inputs": [{"name": "g/up", "hash": "23" * 32, "digest": "45" * 32}], "data": APART}
PROVENANCE_V0 = {
    "name": "g/a", "hash": "ab" * 32, "version": "v1", "fn": "pkg.mod:build",
    "config": {"size": 3, "input": "/store/g/up-2323232323232323"},
    "config_flat": {"size": "3", "input": '["dep", "' + "23" * 32 + '", ""]'},
    "dependencies": [{"name": "g/up", "hash": "23" * 32, "path": "/store/g/up-2323232323232323"}],
    "environment": {"python": "3.12.3", "host": "host"}, "env_digest": "67" * 32, "strict_env": False,
    "host": "host", "runner": "host:12:runner", "started_at": 1700000000.0, "finished_at": 1700000001.0,
    "duration_s": 1.0, "attempts": 1, "retries": 0, "client": "LocalClient", "resources": None,
    "reasons": [{"kind": "new", "detail": "no earlier build of this name"}], "worker": {"run_s": 0.9},
    "output_bytes": 12, "output_files": 2,
}


def test_a_status_record_round_trips():
    record = StatusRecord(BuildState.RUNNING, 3, "me", 12.5, worker="h:1:2.0", attempt_folder=APART)
    data = record.to_json()
    assert data == {"state": "running", "attempt": 3, "holder": "me", "time": 12.5, "worker": "h:1:2.0",
                    "data": APART, "format": RECORD_FORMAT}
    assert StatusRecord.from_json(json.loads(json.dumps(data))) == record


def test_a_success_record_round_trips():
    record = SuccessRecord(hash="ab" * 32, name="g/a", finished_at=3.0, manifest_sha256="cd" * 32,
                           output_digest="ef" * 32, realised_from="/store/g/a-0000000000000000")
    data = record.to_json()
    assert data["format"] == RECORD_FORMAT and "data" not in data and "inputs" not in data
    assert SuccessRecord.from_json(json.loads(json.dumps(data))) == record


def test_a_provenance_record_round_trips():
    record = Provenance(name="g/a", hash="ab" * 32, version="v1", fn="m:f", config={"x": [1, 2]},
                        config_flat={"x": "[1, 2]"}, dependencies=(Dependency("g/up", "23" * 32, "/s/g/up-2"),),
                        duration_s=2.5, attempts=2, output_bytes=0, output_files=0,
                        realised_from=RealisedFrom("/s/g/a-1", "cd" * 32, "ef" * 32, 0.25),
                        nondeterminism={"other": "/s/g/a-1", "files": ["x"]})
    data = json.loads(json.dumps(record.to_json()))
    assert data["dependencies"] == [{"name": "g/up", "hash": "23" * 32, "path": "/s/g/up-2"}]
    assert data["realised_from"] == {"path": "/s/g/a-1", "hash": "cd" * 32, "output_digest": "ef" * 32,
                                     "copied_in_s": 0.25}
    assert Provenance.from_json(data) == record


@pytest.mark.parametrize(("cls", "today"), [(StatusRecord, STATUS_V0), (SuccessRecord, SUCCESS_V0),
                                            (Provenance, PROVENANCE_V0)])
def test_records_written_before_versions_read_and_write_back_the_same(cls, today):
    record = cls.from_json(today)
    assert record is not None and record.format == 0 and record.extra == {}
    assert record.to_json() == {**today, "format": RECORD_FORMAT}


def test_fields_of_records_written_before_versions():
    status = StatusRecord.from_json(STATUS_V0)
    assert status is not None
    assert (status.state, status.attempt, status.holder, status.worker, status.attempt_folder, status.error) == (
        BuildState.FAILED, 2, "host:12:runner", "host:4242:17.5", APART, "ValueError: bad")
    success = SuccessRecord.from_json(SUCCESS_V0)
    assert success is not None and success.output_digest == "ef" * 32 and success.attempt_folder == APART
    assert success.carried() == SuccessRecord(output_digest="ef" * 32, realisation_key="01" * 32,
                                              inputs=SUCCESS_V0["inputs"])
    assert "data" not in success.published_here().to_json()
    provenance = Provenance.from_json(PROVENANCE_V0)
    assert provenance is not None
    assert provenance.dependency_paths() == {"23" * 32: "/store/g/up-2323232323232323"}
    assert (provenance.duration_s, provenance.env_digest, provenance.strict_env) == (1.0, "67" * 32, False)


@pytest.mark.parametrize(("cls", "today"), [(StatusRecord, STATUS_V0), (SuccessRecord, SUCCESS_V0),
                                            (Provenance, PROVENANCE_V0)])
def test_unknown_keys_and_values_of_the_wrong_type_are_kept(cls, today):
    odd = {**today, "from_the_future": {"x": 1}, "attempt" if cls is StatusRecord else "name": True}
    record = cls.from_json(odd)
    assert record is not None and "from_the_future" in record.extra
    assert record.to_json() == {**odd, "format": RECORD_FORMAT}


@pytest.mark.parametrize("value", ["../x", "/tmp/x", ".attempts/2", 3])
def test_a_damaged_attempt_folder_is_not_followed_but_kept(value):
    record = SuccessRecord.from_json({**SUCCESS_V0, "data": value})
    assert record is not None and record.attempt_folder == "" and record.to_json()["data"] == value


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", "null", '"text"', "\xff"])
def test_a_corrupt_record_reads_as_none(tmp_path, text):
    record = StepRecord(str(tmp_path / "g" / "a-0123456789abcdef"))
    assert record.read_success() is None and record.read_provenance() is None
    assert record.read_status_record() is None and record.read_status().state is BuildState.MISSING
    for path in (record.success, record.provenance, record.status):
        fs.atomic_write(path, text)
    assert record.read_success() is None and record.read_provenance() is None
    assert record.read_status_record() is None and record.read_status().state is BuildState.MISSING


def test_the_store_writes_versioned_records_and_reads_them_back(tmp_path):
    record = StepRecord(str(tmp_path / "g" / "a-0123456789abcdef"))
    record.write_status(BuildState.FAILED, 1, "me", error="boom", attempt_folder=APART)
    on_disk = json.loads(fs.read_text(record.status))
    assert on_disk["format"] == RECORD_FORMAT and on_disk["data"] == APART and "traceback" not in on_disk
    status = record.read_status()
    assert status.state is BuildState.FAILED and status.record is not None and status.record.error == "boom"
    manifest = {"files": [], "total_bytes": 0}
    assert record.publish("g/a", "ab" * 32, manifest, SuccessRecord(output_digest="ef" * 32))
    success = record.read_success()
    assert success is not None and (success.name, success.hash, success.output_digest) == ("g/a", "ab" * 32, "ef" * 32)
    assert success.format == RECORD_FORMAT and success.finished_at is not None
    # A record in today's (unversioned) form, written by hand, is read by the store the same way.
    fs.atomic_write(record.provenance, json.dumps(PROVENANCE_V0))
    assert record.read_provenance() == Provenance.from_json(PROVENANCE_V0)
