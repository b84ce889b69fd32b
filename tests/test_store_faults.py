"""The store's retry rules, each against a store that fails (``testsupport.faults.FaultProxy`` in front
of fake-gcs-server): a stalled request that would hold a lease past its expiry, a 503 after a record
was created, a torn record read, a connection reset in the middle of a shard's upload."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner, Result

from marin.cli.group import cli
from marin.execution.store.step_record import StepRecord
from rigging import filesystem as fs
from rigging.lease import Lease, current_lease
from testsupport.faults import FaultKind, Request
from zephyr import Dataset, JsonlSink

_DIGEST = "0123456789abcdef" * 4
_MANIFEST = {"files": [], "total_bytes": 0}


def _named(suffix: str, *, write: bool | None = None):
    def match(r: Request) -> bool:
        return r.object_name.endswith(suffix) and (write is None or r.is_write == write)

    return match


@pytest.mark.timeout(60)
def test_a_lease_whose_renewal_stalls_is_given_up_before_it_can_expire(faulty_gcs, monkeypatch):
    proxy, bucket = faulty_gcs
    monkeypatch.setenv("MARIN_STORE_TIMEOUT", "1")
    proxy.stall_s = 20.0  # far longer than the client waits for an answer, and than the lease lives
    folder = fs.join(bucket, "step-0123456789abcdef/.marin")
    lease = Lease.acquire(folder, ttl=4.0)
    assert lease is not None
    first_expiry = lease.expires_at
    lost: list[float] = []
    lease.on_lost = lambda why: lost.append(time.time())
    # From now on every renewal stalls: the holder must give the lease up (and stop its step) while
    # it still holds it, never run on past the moment another runner may take it over.
    proxy.inject(FaultKind.STALL, match=_named(".marin/lease-00000001.json", write=True), times=1000)
    lease.start_heartbeat()
    deadline = time.time() + 15
    while not lost and time.time() < deadline:
        time.sleep(0.05)
    assert lost, "the heartbeat never gave the lease up"
    assert lost[0] < first_expiry - 0.25, f"given up {lost[0] - first_expiry:+.2f}s after its expiry"
    started = time.monotonic()
    lease.stop_heartbeat()  # no renewal is left hanging on a stalled request
    assert time.monotonic() - started < 3.0
    assert proxy.counts()["stall"] >= 1
    time.sleep(1.5)  # a renewal the client gave up on must never land later
    info = current_lease(folder)
    assert info is not None and info.expires_at == pytest.approx(first_expiry)


def test_a_record_created_though_its_answer_was_lost_is_taken_as_created(faulty_gcs):
    proxy, bucket = faulty_gcs
    record = StepRecord(fs.join(bucket, "s/x-0123456789abcdef"))
    # The success record is written, then the answer is lost (503): the retry finds it there.
    proxy.inject(FaultKind.UNAVAILABLE_AFTER_WRITE, match=_named(".marin/success.json", write=True))
    assert record.publish("s/x", _DIGEST, _MANIFEST) is True, "a publish whose answer was lost reported as lost"
    assert proxy.counts() == {"503-after-write": 1}
    success = record.read_success()
    assert success is not None and success.name == "s/x" and success.hash == _DIGEST
    assert record.publish("s/x", _DIGEST, _MANIFEST) is False  # created once: another create is refused
    # A lease's first number likewise: the create whose answer was lost holds the lease.
    folder = fs.join(bucket, "t/y-0123456789abcdef/.marin")
    proxy.inject(FaultKind.UNAVAILABLE_AFTER_WRITE, match=_named(".marin/lease-00000001.json", write=True))
    lease = Lease.acquire(folder, ttl=30.0)
    assert lease is not None and lease.token == 1, "a lease taken whose answer was lost was not held"
    assert proxy.counts()["503-after-write"] == 2
    assert Lease.acquire(folder, ttl=30.0) is None


def test_a_torn_record_read_is_read_again_never_taken_for_another_record(faulty_gcs):
    proxy, bucket = faulty_gcs
    proxy.hide_truncation = True  # the answer's head says the cut length: only the object's hash can tell
    folder = fs.join(bucket, "s/x-0123456789abcdef/.marin")
    holder = Lease.acquire(folder, ttl=60.0)
    assert holder is not None
    # A contender reads the live lease torn: it must read it again, not take the lease over.
    proxy.inject(FaultKind.TRUNCATED, match=_named(".marin/lease-00000001.json", write=False), times=2)
    assert Lease.acquire(folder, ttl=60.0) is None, "a live lease was taken over from a torn read of it"
    assert proxy.counts()["truncated"] >= 1
    record = StepRecord(fs.join(bucket, "s/x-0123456789abcdef"))
    assert record.publish("s/x", _DIGEST, _MANIFEST)
    written = record.read_success()
    proxy.inject(FaultKind.TRUNCATED, match=_named(".marin/success.json", write=False))
    assert record.read_success() == written, "a torn read of the success record"
    assert proxy.pending() == 0


def test_a_shard_upload_reset_midway_is_sent_again_and_committed_once(faulty_gcs):
    proxy, bucket = faulty_gcs
    out = fs.join(bucket, "docs")
    texts = [f"document {i}: " + "words " * 40 for i in range(200)]  # shards of ~25 KB: a reset lands midway
    proxy.inject(FaultKind.RESET_BEFORE_BODY, match=_named("docs/part-00000.jsonl", write=True))
    result = Dataset.from_items([texts[:100], texts[100:]]).write(JsonlSink(out), in_process=True)
    [event] = proxy.log
    assert event.kind is FaultKind.RESET_BEFORE_BODY and "body bytes" in event.note and "part-00000" in event.request
    shards = result.index["shards"]
    read = []
    for shard in shards:
        data = fs.read_bytes(fs.join(out, shard["path"]))
        assert hashlib.sha256(data).hexdigest() == shard["sha256"]
        read += [json.loads(line)["text"] for line in data.decode().splitlines()]
    assert read == texts
    assert sorted(fs.listdir(out)) == [".commits", "index.json", "part-00000.jsonl", "part-00001.jsonl"]
    assert Dataset.from_items([texts[:100], texts[100:]]).write(JsonlSink(out), in_process=True).reused == (0, 1)  # nothing to redo


_EXPERIMENT = '''
from dataclasses import dataclass

from marin.execution.core.step import Step
from rigging import filesystem as fs


@dataclass(frozen=True)
class HelloConfig:
    text: str = "hello"


def write_hello(config, output_path):
    fs.atomic_write(fs.join(output_path, "out.txt"), config.text)
    assert fs.read_text(fs.join(output_path, "out.txt")) == config.text


steps = [Step(name="faults/hello", fn=write_hello, config=HelloConfig())]
'''


def _marin(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "marin.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def _marin_here(*args: str, env: dict[str, str] | None = None) -> Result:
    """``marin ARGS`` in this process: where nothing is asserted of the runner's own process (its
    request counts, its exit while a step runs), a process of its own would cost an interpreter and
    the engine's imports and prove nothing more."""
    return CliRunner().invoke(cli, list(args), env=env)


def test_requests_and_retries_are_counted_in_the_provenance_and_shown_by_run_status_and_show(faulty_gcs, tmp_path):
    proxy, bucket = faulty_gcs
    experiment = tmp_path / "exp_counted.py"
    experiment.write_text(_EXPERIMENT)
    prefix = fs.join(bucket, "store")
    # One retry in the step's own process (its file), one in the runner's (the build's provenance).
    proxy.inject(FaultKind.UNAVAILABLE, match=_named("/out.txt", write=True))
    proxy.inject(FaultKind.THROTTLED_RETRY_AFTER, match=_named(".marin/provenance.json", write=True))
    run = _marin("run", f"{experiment}:steps", "--prefix", prefix)
    assert run.returncode == 0, run.stdout + run.stderr
    assert proxy.pending() == 0
    line = next(x for x in run.stdout.splitlines() if x.startswith("store: "))
    assert re.search(r"store: \d+ requests \(.*\), 1 retried \(429 1\)", line), line
    record = StepRecord(fs.join(prefix, "faults", fs.listdir(fs.join(prefix, "faults"))[0]))
    counted = record.read_provenance().store_requests
    assert counted["retries"] == {"write": 1} and counted["causes"] == {"503": 1}
    assert counted["requests"]["write"] >= 2 and counted["requests"]["read"] >= 1
    status = _marin_here("status", f"{experiment}:steps", "--prefix", prefix)
    assert status.exit_code == 0, status.stderr
    assert status.stdout.splitlines()[0].split() == ["step", "state", "path", "age", "duration", "requests"]
    assert "(1 retried)" in status.stdout.splitlines()[1]
    assert re.search(r"store requests of these builds' steps: \d+ requests .*, 1 retried \(503 1\)", status.stdout)
    show = _marin_here("show", "faults/hello", "--prefix", prefix)
    assert re.search(r"store requests +\d+ requests .*, 1 retried \(503 1\)", show.stdout), show.stdout


def test_a_store_that_stays_down_is_one_error_line_with_a_hint_after_the_deadline(faulty_gcs, tmp_path):
    proxy, bucket = faulty_gcs
    experiment = tmp_path / "exp_down.py"
    experiment.write_text(_EXPERIMENT)
    proxy.set_down(503)
    started = time.monotonic()
    # In this process: the runner gives up while it plans, before any step process is started.
    run = _marin_here("run", f"{experiment}:steps", "--prefix", fs.join(bucket, "store"),
                      env={"MARIN_STORE_DEADLINE": "3", "MARIN_STORE_TIMEOUT": "1"})
    took = time.monotonic() - started
    assert run.exit_code == 1, run.stdout + run.stderr
    error = [x for x in run.stderr.splitlines() if x.startswith("error: ")]
    # It gives up once the next attempt could not be made within the 3 s deadline.
    assert len(error) == 1 and re.search(r"the store did not answer in [123]s \(\d+ attempt", error[0]), run.stderr
    assert "the last: 503 Service Unavailable" in error[0] and error[0].startswith("error: list gs://"), error[0]
    assert "hint: the object store did not answer" in run.stderr and "Traceback" not in run.stderr
    assert took < 60


_CAUSES = {FaultKind.RESET_BEFORE_BODY: "reset", FaultKind.RESET_AFTER_BODY: "reset", FaultKind.THROTTLED: "429",
           FaultKind.THROTTLED_RETRY_AFTER: "429", FaultKind.UNAVAILABLE: "503",
           FaultKind.UNAVAILABLE_RETRY_AFTER: "503", FaultKind.STALL: "timeout", FaultKind.TRUNCATED: "torn",
           FaultKind.UNAVAILABLE_AFTER_WRITE: "503"}


@pytest.mark.parametrize("kind", list(FaultKind), ids=lambda k: k.value)
def test_every_kind_of_fault_is_retried_within_bounds_and_counted(faulty_gcs, monkeypatch, kind):
    from rigging.store_requests import request_counts

    proxy, bucket = faulty_gcs
    monkeypatch.setenv("MARIN_STORE_TIMEOUT", "1")
    proxy.stall_s, proxy.retry_after_s = 6.0, 1
    path = fs.join(bucket, "k/record.json")
    body = json.dumps({"kind": kind.value, "pad": "x" * 6000})  # longer than what a reset before the body lets in
    write = kind is FaultKind.UNAVAILABLE_AFTER_WRITE or kind.value.startswith("reset")
    proxy.inject(kind, match=_named("k/record.json", write=write))
    before = request_counts()
    started = time.monotonic()
    fs.atomic_write(path, body)
    assert fs.read_text(path) == body
    took = time.monotonic() - started
    counted = request_counts(since=before)
    assert proxy.counts() == {kind.value: 1} and proxy.pending() == 0
    assert counted["causes"] == {_CAUSES[kind]: 1}, counted
    assert counted["retries"] == {("write" if write else "read"): 1}
    if kind in (FaultKind.THROTTLED_RETRY_AFTER, FaultKind.UNAVAILABLE_RETRY_AFTER):
        assert took >= 1.0  # its Retry-After was waited out (the first backoff alone is 0.25 to 0.5 s)
    elif kind is FaultKind.STALL:
        assert 1.0 <= took < 4.0  # abandoned after the timeout, long before the stall ended
    else:
        assert took < 2.0  # the first backoff is short (0.25 to 0.5 s)


def test_the_kind_of_each_request_is_named_from_its_method_and_url():
    from rigging.gcs_client import request_kind

    base = "http://h/storage/v1/b/bkt"
    assert request_kind("GET", "http://h/download/storage/v1/b/bkt/o/a%2Fb?alt=media", {}) == "read"
    assert request_kind("GET", f"{base}/o", {"prefix": "a/", "delimiter": "/"}) == "list"
    assert request_kind("GET", f"{base}/o/a%2Fb", {}) == "stat"
    assert request_kind("POST", "http://h/upload/storage/v1/b/bkt/o", {"uploadType": "multipart",
                                                                       "ifGenerationMatch": "0"}) == "create"
    assert request_kind("POST", "http://h/upload/storage/v1/b/bkt/o", {"uploadType": "multipart"}) == "write"
    assert request_kind("POST", "http://h/upload/storage/v1/b/bkt/o", {"uploadType": "resumable"}) == "upload"
    assert request_kind("DELETE", f"{base}/o/a", {}) == "delete"
    assert request_kind("POST", f"{base}/o/a/rewriteTo/b/bkt/o/c", {}) == "copy"


_SLOW_EXPERIMENT = '''
import os
import time
from dataclasses import dataclass

from marin.execution.core.step import Step
from rigging import filesystem as fs


@dataclass(frozen=True)
class SlowConfig:
    pid_file: str


def slow_hello(config, output_path):
    if not os.path.exists(config.pid_file):  # the first attempt waits for the store to go down
        with open(config.pid_file, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(120)
    fs.atomic_write(fs.join(output_path, "out.txt"), "hello")


steps = [Step(name="faults/slow", fn=slow_hello, config=SlowConfig(os.environ["SLOW_PID_FILE"]))]
'''


@pytest.mark.timeout(180)
def test_a_store_that_goes_down_under_a_running_step_stops_it_before_its_lease_expires(faulty_gcs, tmp_path):
    import psutil

    proxy, bucket = faulty_gcs
    experiment = tmp_path / "exp_slow.py"
    experiment.write_text(_SLOW_EXPERIMENT)
    pid_file = tmp_path / "step.pid"
    prefix = fs.join(bucket, "store")
    # Once the store is down every request of the runner waits out its deadline: stopping the step,
    # recording it and removing its GC root one after another (1.5 s each, not the 3 s it once had;
    # the step is stopped by the lease's own give-up, whatever the deadline).
    env = {**os.environ, "SLOW_PID_FILE": str(pid_file), "MARIN_LEASE_TTL": "4", "MARIN_STORE_TIMEOUT": "1",
           "MARIN_STORE_DEADLINE": "1.5"}
    runner = subprocess.Popen([sys.executable, "-m", "marin.cli.main", "run", f"{experiment}:steps", "--prefix",
                               prefix], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 90
        while not pid_file.exists():
            assert runner.poll() is None and time.monotonic() < deadline, runner.communicate()
            time.sleep(0.05)
        step = psutil.Process(int(pid_file.read_text()))
        proxy.set_down(503)
        down = time.monotonic()
        step.wait(timeout=30)
        stopped = time.monotonic() - down
        out, err = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
        proxy.set_down(None)
    # The last renewal was at most ttl/4 (1 s) before the store went down: the step is stopped before
    # the lease could expire (4 s after that renewal), with room for a loaded machine.
    assert stopped < 4.0 + 1.0, stopped
    assert runner.returncode == 1, out + err
    errors = [x for x in err.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1 and "the store did not answer" in errors[0], err
    assert "hint: the object store did not answer" in err and "Traceback" not in err
    # The store is back: the next run builds the step (its earlier attempt stopped, not half-published).
    # (A lease of the default length: what is tested here is that it builds.)
    again = _marin_here("run", f"{experiment}:steps", "--prefix", prefix, env={"SLOW_PID_FILE": str(pid_file)})
    assert again.exit_code == 0, again.stdout + again.stderr
    assert "1 ran" in again.stdout
    verify = _marin_here("verify", f"{experiment}:steps", "--prefix", prefix, env={"SLOW_PID_FILE": str(pid_file)})
    assert verify.exit_code == 0 and "no problems" in verify.stdout, verify.stdout + verify.stderr


@pytest.mark.parametrize("kind", [FaultKind.UNAVAILABLE_AFTER_WRITE, FaultKind.RESET_BEFORE_BODY],
                         ids=lambda k: k.value)
def test_a_resumable_upload_through_fsspec_survives_a_fault_on_its_last_part(faulty_gcs, kind):
    # Libraries that open gs:// through fsspec themselves (Orbax's checkpoint metadata, via
    # etils.epath) get the store's file system, and a resumable upload whose last part was applied
    # but not answered is finished, not a "not found" from a session the store already closed.
    import fsspec

    from rigging.gcs import use_in_fsspec
    from rigging.gcs_client import RetryingGCSFileSystem

    proxy, bucket = faulty_gcs
    use_in_fsspec()
    gcs = fsspec.filesystem("gs")
    assert isinstance(gcs, RetryingGCSFileSystem)
    data = bytes(range(256)) * 3000  # 768,000 bytes: three parts of 256 KiB, the last one short
    proxy.inject(kind, match=lambda r: r.is_write and "upload_id=" in r.target and "bytes 524288-" in
                 r.headers.get("content-range", ""))
    path = f"{bucket[len('gs://'):]}/big/file.bin"
    with gcs.open(path, "wb", block_size=2**18) as f:
        f.write(data)
    assert [e.kind for e in proxy.log] == [kind]
    assert fs.read_bytes(f"{bucket}/big/file.bin") == data
    assert proxy.pending() == 0
