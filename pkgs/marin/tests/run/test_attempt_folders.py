"""Attempt folders: an attempt that takes a step over from a holder whose process may still run
elsewhere writes in ``.attempts/<lease>/``, the records name it, and everything that reads a
build goes through them (verify, copies to and from caches, the steps reading it, the CLI)."""

from __future__ import annotations

import json
import socket
import time

import pytest
import steps_for_tests as t

from marin.execution.run.runner import StepRunner
from marin.execution.store.cache import copy_tree, push_output
from marin.execution.store.gc import collect_garbage, find_outputs
from marin.execution.store.manifest import compute_manifest, verify_manifest
from marin.execution.store.records import BuildState, StatusRecord, StepRecord, SuccessRecord, files_folder
from marin.execution.store.store import StepStore
from marin.execution.store.verify import Verdict, verify_output
from rigging import filesystem as fs
from rigging.lease import Lease
from testsupport.namespaces import gone_place

APART = ".attempts/00000002"


@pytest.mark.parametrize("value", ["../x", "/tmp/x", ".attempts/2", ".attempts/00000002/..", "x", 3, None, ""])
def test_records_name_no_folder_but_an_attempt_folder(value):
    # A damaged or hostile record cannot send readers outside the step's folder.
    for read in (SuccessRecord.from_json, StatusRecord.from_json):
        record = read({"data": value})
        assert record is not None and record.attempt_folder == ""
        assert files_folder("/s/x-0123456789abcdef", record.attempt_folder) == "/s/x-0123456789abcdef"


def test_records_name_an_attempt_folder():
    record = SuccessRecord.from_json({"data": APART})
    assert record is not None and record.attempt_folder == APART
    assert files_folder("/s/x-0123456789abcdef", record.attempt_folder) == f"/s/x-0123456789abcdef/{APART}"
    assert StepRecord("/s/x").attempt_folder(2) == APART


def _publish_apart(output: str) -> dict:
    """A build published from its attempt folder, with a stale writer's file in the step's folder."""
    record = StepRecord(output)
    fs.atomic_write(fs.join(output, "v.txt"), "written by a holder that lost its lease")
    fs.atomic_write(fs.join(output, APART, "v.txt"), "published")
    fs.atomic_write(fs.join(output, APART, "sub", "w.bin"), b"\x00\x01")
    manifest = compute_manifest(fs.join(output, APART))
    record.write_json(record.manifest, manifest)
    assert record.publish("x", "0" * 64, manifest, attempt_folder=APART)
    return manifest


def test_a_build_in_an_attempt_folder_is_verified_copied_and_pushed_from_there(store_url):
    store = StepStore(store_url)
    output = store.output_path("x-0123456789abcdef")
    manifest = _publish_apart(output)
    assert sorted(e["path"] for e in manifest["files"]) == ["sub/w.bin", "v.txt"]
    record = StepRecord(output)
    assert record.files_folder() == fs.join(output, APART)
    check = verify_output("x", output)
    assert check.verdict is Verdict.OK and check.files == 2, check.problems
    # A stale writer scribbling in the step's folder changes nothing published.
    fs.atomic_write(fs.join(output, "v.txt"), "written again")
    fs.atomic_write(fs.join(output, "more.txt"), "and more")
    assert verify_output("x", output).verdict is Verdict.OK

    copy = fs.join(store_url, "copy")
    assert copy_tree(output, copy, records=False) == 2
    assert fs.read_text(fs.join(copy, "v.txt")) == "published" and verify_manifest(copy, manifest) == []
    assert not fs.exists(fs.join(copy, ".attempts")) and not fs.exists(fs.join(copy, "more.txt"))

    cache = fs.join(store_url, "cache")
    assert push_output(output, cache, "x-0123456789abcdef")
    pushed = StepRecord(fs.join(cache, "x-0123456789abcdef"))
    success = pushed.read_success()
    assert success is not None and success.attempt_folder == "" and pushed.files_folder() == pushed.output_path
    assert "data" not in (pushed.read_json(pushed.success) or {})
    assert verify_output("x", pushed.output_path).verdict is Verdict.OK

    fs.atomic_write(fs.join(output, APART, "v.txt"), "publishes")  # same size, other bytes
    check = verify_output("x", output)
    assert check.verdict is Verdict.CHANGED and check.problems == ["v.txt: checksum changed"]


def test_progress_is_read_where_the_running_attempt_writes(tmp_path):
    record = StepRecord(str(tmp_path / "x-0123456789abcdef"))
    record.write_status(BuildState.RUNNING, 2, "runner", attempt_folder=APART)
    assert record.files_folder(current=True) == fs.join(record.output_path, APART)
    assert record.files_folder() == record.output_path  # nothing published yet


def _left_running_elsewhere(output: str) -> None:
    """What a runner on another host leaves when it is frozen mid-step: an expired lease 1 and a
    status naming a running process there, and a file of its attempt in the step's folder."""
    record = StepRecord(output)
    fs.atomic_write(fs.join(output, "partial.txt"), "checkpoint of the first attempt")
    assert Lease.acquire(record.meta, ttl=0.05, holder="another-host:1:runner") is not None  # never renewed
    record.write_status(BuildState.RUNNING, 1, "another-host:1:runner", worker="another-host:4242:17.5")
    time.sleep(0.1)  # past its expiry


@pytest.mark.parametrize("where", ["another host", "this host, gone"])
def test_a_takeover_writes_apart_only_from_a_process_it_cannot_see_end(tmp_path, where):
    counter = str(tmp_path / "calls")
    store = StepStore(str(tmp_path / "store"))
    a = t.node("apart/a", counter, value=1)
    b = t.node("apart/b", counter, a)
    runner = StepRunner(prefix=store.prefix, client=t.InProcessClient(), poll_interval=0.01)
    folder = store.output_path(runner.plan([b]).steps[0].output_name)
    _left_running_elsewhere(folder)
    record = StepRecord(folder)
    if where != "another host":
        status = record.read_json(record.status) or {}
        status["worker"] = f"{socket.gethostname()}:{gone_place().to_text()}"  # a process of this host, gone
        record.write_json(record.status, status)

    assert runner.run([b]).ok
    success = record.read_success()
    files = fs.join(folder, APART) if where == "another host" else folder
    assert success is not None and success.attempt_folder == (APART if where == "another host" else "")
    assert record.files_folder() == files
    # It resumed from what the first attempt wrote (a copy of it), and published only its own folder.
    assert fs.read_text(fs.join(files, "partial.txt")) == "checkpoint of the first attempt"
    assert json.loads(fs.read_text(fs.join(files, "out.txt")))["value"] == 1
    assert verify_output("apart/a", folder).verdict is Verdict.OK
    # The step reading it was handed the published build's folder.
    out_b = json.loads(fs.read_text(fs.join(store.output_path(runner.plan([b]).steps[1].output_name), "out.txt")))
    assert out_b["inputs"] == [fs.read_text(fs.join(files, "out.txt"))]
    # A later forced rebuild starts over in the step's own folder.
    assert StepRunner(prefix=store.prefix, client=t.InProcessClient(), poll_interval=0.01,
                      force=["apart/a"]).run([b]).ok
    assert record.files_folder() == folder and not fs.exists(fs.join(folder, ".attempts"))


def test_gc_counts_an_attempt_folder_as_part_of_its_step(tmp_path):
    store = StepStore(str(tmp_path / "store"))
    output = store.output_path("x-0123456789abcdef")
    _publish_apart(output)
    # The running step's progress record sits in its attempt folder's own .marin/.
    fs.atomic_write(fs.join(output, APART, ".marin", "progress.json"), "{}")
    assert list(find_outputs(store)) == ["x-0123456789abcdef"]
    assert collect_garbage(store, {"x-0123456789abcdef"}).removed == []
    assert verify_output("x", output).verdict is Verdict.OK
    assert collect_garbage(store, set()).removed == ["x-0123456789abcdef"] and not fs.exists(output)
