"""One contract suite for DistributedClient, run against LocalClient and a real Ray head."""

from __future__ import annotations

import time

import psutil
import pytest

from fray.cluster import DistributedClient, JobCancelled, JobFailed, LocalClient
from fray.inprocess import InProcessClient
from testsupport import fray_jobs


@pytest.fixture(scope="module")
def local_client():
    client = LocalClient()
    yield client
    client.shutdown()


@pytest.fixture
def inprocess_client():
    return InProcessClient()


@pytest.fixture(params=["local", "ray", "inprocess"])
def client(request) -> DistributedClient:
    return request.getfixturevalue(f"{request.param}_client")


@pytest.fixture(params=["local", "ray"])
def process_client(request) -> DistributedClient:
    """The clients that run each call in a process of its own (it can die, time out, be cancelled)."""
    return request.getfixturevalue(f"{request.param}_client")


def test_submit_returns_the_value(client):
    handle = client.submit(fray_jobs.add, 2, 3, scale=10, name="add")
    assert handle.result(timeout=60) == 50
    assert handle.done()
    assert handle.name == "add"


def test_a_job_is_named_after_its_function_unless_named(client):
    handle = client.submit(fray_jobs.square, 3)
    assert handle.name == "square"
    handle.result(timeout=60)


def test_an_exception_reaches_the_caller_with_its_traceback(client):
    handle = client.submit(fray_jobs.raise_value_error, "bad input 42")
    with pytest.raises(JobFailed, match="ValueError: bad input 42") as info:
        handle.result(timeout=60)
    assert "raise_value_error" in info.value.remote_traceback


def test_a_process_that_dies_is_a_failure_that_carries_its_last_output(process_client):
    handle = process_client.submit(fray_jobs.die_hard, 3, "F1206 client.h:80] Terminating process")
    with pytest.raises(JobFailed) as info:
        handle.result(timeout=60)
    assert info.value.process_died and info.value.exitcode == 3
    # A native abort says why only on its stderr, in a log folder the client removes at shutdown.
    assert "its last output:\nF1206 client.h:80] Terminating process" in str(info.value)


def test_a_reply_that_came_just_before_the_process_ended_is_its_result(local_client):
    """A look at the pipe that finds nothing, then the process found ended: the reply came between
    the two (the pipe holds it), so the call finished; it did not die "with exit code 0"."""
    handle = local_client.submit(fray_jobs.add, 2, 3, scale=10, name="add")
    handle._process.join(timeout=60)  # it has sent its reply and exited
    real = handle._conn

    class LookedTooEarly:
        """The pipe as the first look saw it: empty (the reply was not written yet)."""

        looked = False

        def poll(self, timeout: float = 0.0) -> bool:
            if not self.looked:
                self.looked = True
                return False
            return real.poll(timeout)

        def recv(self):
            return real.recv()

    handle._conn = LookedTooEarly()
    assert handle.done()
    assert handle.result(timeout=5) == 50


def test_result_times_out(process_client):
    handle = process_client.submit(fray_jobs.sleep_then_return, 30, "late")
    with pytest.raises(TimeoutError):
        handle.result(timeout=0.5)
    assert not handle.done()
    handle.cancel()


def test_env_is_set_for_the_call(client):
    handle = client.submit(fray_jobs.echo_env, "FRAY_CONTRACT_VAR", env={"FRAY_CONTRACT_VAR": "hello"})
    assert handle.result(timeout=60) == "hello"
    assert client.submit(fray_jobs.echo_env, "FRAY_CONTRACT_VAR").result(timeout=60) is None


def test_logs_capture_stdout_stderr_and_grandchildren(process_client):
    handle = process_client.submit(fray_jobs.print_lines, 3)
    assert handle.result(timeout=60) == 3
    deadline = time.monotonic() + 10
    while "from grandchild" not in handle.logs() and time.monotonic() < deadline:
        time.sleep(0.1)
    logs = handle.logs()
    for expected in ("line 0", "line 2", "to stderr", "from grandchild"):
        assert expected in logs


def test_logs_stream_while_the_job_runs(process_client):
    # 1.2 s of output, a line every 40 ms: many of the reader's polls (and of Ray's forwards, 0.2 s) long.
    handle = process_client.submit(fray_jobs.print_lines, 30, 0.04)
    chunks = list(handle.iter_logs(poll_interval=0.05))
    assert len(chunks) > 1, "output arrived only at the end, not streamed"
    assert "line 29" in "".join(chunks)
    assert handle.result(timeout=10) == 30


# None: a plain cancel first (the job ends its tree itself); 0: at once (on Ray the worker is killed).
@pytest.mark.parametrize("grace_s", [None, 0])
def test_cancel_ends_the_job_and_its_grandchildren(process_client, tmp_path, grace_s):
    handle, grandchild = fray_jobs.submit_with_grandchild(process_client, str(tmp_path / "grandchild.pid"))
    handle.cancel(grace_s=grace_s)
    with pytest.raises(JobCancelled):
        handle.result(timeout=30)
    gone, alive = psutil.wait_procs([grandchild], timeout=15)
    assert not alive, f"grandchild {grandchild.pid} outlived the cancelled job"


def test_a_job_killed_outright_takes_what_it_started_with_it(process_client, tmp_path):
    # SIGKILL of the job's process alone (the OOM killer; Ray's end of a force-cancelled worker's
    # children): nothing in it can act, yet what it started must not live on.
    handle, grandchild = fray_jobs.submit_with_grandchild(process_client, str(tmp_path / "grandchild.pid"))
    job = grandchild.parent()
    assert job is not None
    job.kill()
    with pytest.raises(JobFailed):
        handle.result(timeout=30)
    gone, alive = psutil.wait_procs([grandchild], timeout=15)
    assert not alive, f"grandchild {grandchild.pid} outlived its killed job"


def test_map_returns_results_in_order(client):
    assert client.map(fray_jobs.square, [3, 1, 4, 1, 5]) == [9, 1, 16, 1, 25]


def test_map_fails_when_one_item_fails(client):
    with pytest.raises(JobFailed, match="boom"):
        client.map(fray_jobs.raise_value_error, ["boom"])


def test_actor_keeps_state_and_returns_futures(client):
    counter = client.create_actor(fray_jobs.Counter, 10, env={"FRAY_ACTOR_VAR": "set"})
    try:
        futures = [counter.incr(i) for i in range(1, 5)]
        assert [f.result(timeout=60) for f in futures] == [11, 13, 16, 20]
        assert counter.call("incr", by=0).result(timeout=30) == 20
        assert counter.env("FRAY_ACTOR_VAR").result(timeout=30) == "set"
        with pytest.raises(JobFailed, match="counter at 20 refuses"):
            counter.fail().result(timeout=30)
        assert counter.incr().result(timeout=30) == 21, "the actor survives a failed call"
    finally:
        counter.kill()


def test_an_actor_whose_constructor_fails_fails_its_calls(client):
    actor = client.create_actor(fray_jobs.FailingActor)
    with pytest.raises(JobFailed, match="cannot construct"):
        actor.ping().result(timeout=60)
    actor.kill()


def test_resources_must_be_ray_options(client):
    with pytest.raises(TypeError, match="to_ray_options"):
        client.submit(fray_jobs.add, 1, 2, resources=42)


class _Duck:
    def to_ray_options(self):
        return {"num_cpus": 1}


def test_resources_with_to_ray_options_are_accepted(client):
    assert client.submit(fray_jobs.add, 1, 2, resources=_Duck()).result(timeout=60) == 3


def test_inprocess_logs_hold_what_the_call_printed_and_its_traceback(inprocess_client):
    handle = inprocess_client.submit(fray_jobs.print_lines, 2)
    assert handle.result() == 2
    assert "line 0" in handle.logs() and "line 1" in handle.logs()
    failed = inprocess_client.submit(fray_jobs.raise_value_error, "shown in the log")
    assert failed.done()
    assert "ValueError: shown in the log" in failed.logs()
