"""The records of a published build are written once: a holder that lost its lease cannot replace
them afterwards, on every store that enforces create-if-absent (local files, memory://, and gs:// on
fake-gcs-server; gcp-storage-emulator ignores the precondition real GCS enforces on every upload)."""

from __future__ import annotations

import pytest

from marin.execution.store.records import StepRecord
from rigging import filesystem as fs
from rigging.lease import LeaseLost


@pytest.fixture(params=["local", "memory", "gs-fake-gcs"])
def output(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "step-0123456789abcdef")
    if request.param == "memory":
        return request.getfixturevalue("memory_prefix") + "/step-0123456789abcdef"
    return request.getfixturevalue("strict_gcs_bucket") + "/step-0123456789abcdef"


def _still_ours() -> None:
    pass


def _lost() -> None:
    raise LeaseLost("lease 1 on step was taken over (newest is 2)")


def test_a_record_left_by_an_earlier_attempt_is_replaced_by_the_holder(output):
    record = StepRecord(output)
    record.write_json(record.manifest, {"files": ["left by a killed attempt"]})
    record.write_once(record.manifest, {"files": []}, listed=fs.listdir(record.meta), still_ours=_still_ours)
    assert record.read_json(record.manifest) == {"files": []}


def test_a_holder_that_lost_its_lease_cannot_replace_the_published_record(output):
    record = StepRecord(output)
    record.write_once(record.manifest, {"files": ["the winner's"]}, listed=(), still_ours=_still_ours)
    # The loser believes the folder empty (an old listing): its create is refused, its lease check fails.
    with pytest.raises(LeaseLost):
        record.write_once(record.manifest, {"files": ["the loser's"]}, listed=(), still_ours=_lost)
    assert record.read_json(record.manifest) == {"files": ["the winner's"]}
