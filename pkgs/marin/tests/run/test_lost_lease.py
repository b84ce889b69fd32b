"""A lost lease stops its step: taken over by another runner, or expired while the store could not
be reached, the step's process is killed at once and the attempt is recorded as lost, not failed."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest
import steps_for_tests as t

from iris.cluster import ResourceConfig
from marin.execution.core.step import Step
from marin.execution.run.outcome import Outcome
from marin.execution.run.runner import StepRunner
from marin.execution.store.records import StepRecord
from rigging import filesystem as fs
from rigging.process import running
from testsupport.accelerator import hold_lock
from testsupport.leases import take_over

TTL = 1.0  # the heartbeat renews every TTL / 4


def _wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _pid(counter: str) -> int | None:
    path = os.path.join(counter, "ticker.pid")
    return int(open(path).read()) if os.path.exists(path) else None


def _run_in_thread(runner: StepRunner, step: Step) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        out["result"] = runner.run([step])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _pids(counter: str, hosts: int) -> list[int] | None:
    """The pids of the step's processes once every one has started (None before)."""
    names = ["ticker.pid", *(f"ticker-{n}.pid" for n in range(2, hosts + 1))]
    paths = [os.path.join(counter, name) for name in names]
    if not all(os.path.exists(p) for p in paths):
        return None
    return [int(open(p).read()) for p in paths]


# Where a step's process runs: forked from the warm worker, a fresh interpreter, a Ray task on a
# real local cluster, or every process of a two-host step.
WHERE = ["warm", "fresh", "ray", "two-hosts"]


@pytest.mark.parametrize("where", WHERE)
def test_a_lease_taken_over_stops_the_step_at_once_and_the_attempt_is_lost_not_failed(tmp_path, counter, where,
                                                                                      request):
    prefix = str(tmp_path / "store")
    hosts = 2 if where == "two-hosts" else 1
    step = Step("lost/ticker", t.ticker, t.TickConfig(hosts=hosts, counter_dir=counter),
                resources=ResourceConfig.with_cpu(1, hosts=hosts))
    options: dict = {"warm_workers": where == "warm"}
    ttl = TTL
    if where == "ray":
        options.update(backend="ray", ray_address=request.getfixturevalue("ray_cluster"))
        # The runner here shares its process with a Ray driver's threads: on a loaded 2-core machine
        # a renewal once came later than 1 s, the lease expired and the step ran a third time.
        ttl = 3 * TTL
    runner = StepRunner(prefix=prefix, lease_ttl=ttl, poll_interval=0.02, **options)
    record = StepRecord(os.path.join(prefix, step.output_name))
    thread, out = _run_in_thread(runner, step)
    try:
        _wait_for(lambda: _pids(counter, hosts) is not None, 120, "the step's processes to start")
        processes = [psutil.Process(pid) for pid in _pids(counter, hosts) or []]
        thief = take_over(record.meta)
        token = thief.token
        taken = time.monotonic()
        psutil.wait_procs(processes, timeout=30)  # killed, long before their 60 s
        stopped_after = time.monotonic() - taken
        assert not [p for p in processes if p.is_running() and running(p.pid)]
        # The thief gives the step up (released), so this runner takes it again and builds it.
        thief.release()
        thread.join(timeout=120)
    finally:
        runner.close()
    assert not thread.is_alive()
    result = out["result"]
    assert result.ok and result.by_name("lost/ticker").outcome is Outcome.RAN
    assert t.calls(counter)["ticker"] == 2 * hosts
    # Two heartbeat periods, with room for a loaded machine: the process did not run on to its end.
    assert stopped_after < 10 * ttl / 4 + 5, stopped_after
    lost = record.read_json(record.lost(token - 1))
    assert lost is not None and lost["state"] == "lost" and "taken over" in lost["why"]
    provenance = record.read_json(record.provenance)
    assert [a["state"] for a in provenance["lost_attempts"]] == ["lost"]
    assert record.read_status().error is None  # lost is not failed


def test_a_step_that_published_while_its_lease_was_valid_reports_no_lease_error(tmp_path, counter, caplog):
    prefix = str(tmp_path / "store")
    step = Step("lost/quick", t.ticker, t.TickConfig(seconds=0.3, counter_dir=counter))
    runner = StepRunner(prefix=prefix, lease_ttl=TTL, poll_interval=0.02)
    try:
        result = runner.run([step])
    finally:
        runner.close()
    assert result.ok and result.by_name("lost/quick").outcome is Outcome.RAN
    record = StepRecord(result.by_name("lost/quick").output_path)
    time.sleep(TTL)  # past the lease's expiry: nothing is still watching it
    assert "lost_attempts" not in record.read_json(record.provenance)
    assert not [r for r in caplog.records if "lease" in r.getMessage() and r.levelname == "WARNING"]


def test_a_lease_that_expires_while_the_store_cannot_be_reached_stops_the_step(tmp_path, counter, strict_gcs_emulator):
    from testsupport.gcs import use_gcs_emulator
    from testsupport.latency import LatencyProxy

    with LatencyProxy(strict_gcs_emulator.url) as proxy, use_gcs_emulator(proxy.url):
        prefix = strict_gcs_emulator.create_bucket() + "/store"
        step = Step("lost/unreachable", t.ticker, t.TickConfig(counter_dir=counter))
        runner = StepRunner(prefix=prefix, lease_ttl=TTL, poll_interval=0.02)
        thread, out = _run_in_thread(runner, step)
        try:
            _wait_for(lambda: _pid(counter) is not None, 120, "the step to start")
            process = psutil.Process(_pid(counter))
            proxy.delay_s = 3 * TTL  # every request now outlasts the lease: its renewal cannot land
            cut = time.monotonic()
            process.wait(timeout=30)
            stopped_after = time.monotonic() - cut
            proxy.delay_s = 0.0  # the store is back: the runner takes the step again and builds it
            thread.join(timeout=180)
        finally:
            proxy.delay_s = 0.0
            runner.close()
        assert not thread.is_alive()
        assert out["result"].ok and t.calls(counter)["ticker"] == 2
        # At the latest when the lease expires (TTL after the last renewal), then at once.
        assert stopped_after < TTL + 5, stopped_after
        record = StepRecord(out["result"].by_name("lost/unreachable").output_path)
        (lost,) = record.read_json(record.provenance)["lost_attempts"]
        assert lost["state"] == "lost" and "could not be renewed in time" in lost["why"]


@pytest.mark.parametrize("max_retries", [0, 2])
def test_a_step_ended_by_its_leases_new_holder_is_lost_not_failed_nor_retried(tmp_path, counter, max_retries):
    # The step's lease is taken over and its process ends at once, long before this runner's
    # heartbeat (every 15 s) could notice: as when the new holder ends the process of a runner
    # that was frozen past its lease's expiry. It must not be recorded as failed, nor started
    # again under the lost lease: the runner waits for the new holder, then builds it.
    prefix = str(tmp_path / "store")
    step = Step("lost/ended", t.steal_lease, t.NodeConfig(label="ended", sleep=0.8, fail=True, counter_dir=counter),
                resources=ResourceConfig.with_cpu(1, max_retries=max_retries))
    runner = StepRunner(prefix=prefix, lease_ttl=60.0, poll_interval=0.02)
    try:
        result = runner.run([step])
    finally:
        runner.close()
    outcome = result.by_name("lost/ended")
    assert result.ok and outcome.outcome is Outcome.RAN, outcome.error
    assert t.calls(counter)["ended"] == 2  # the killed call, then the build after the thief's lease expired
    record = StepRecord(outcome.output_path)
    assert json.loads(fs.read_text(fs.join(outcome.output_path, "out.txt")))["call"] == 2
    provenance = record.read_json(record.provenance)
    assert [a["state"] for a in provenance["lost_attempts"]] == ["lost"]
    assert "taken over" in provenance["lost_attempts"][0]["why"]
    assert record.read_status().error is None


FROZEN_RUNNER = textwrap.dedent("""
    import json, sys
    import steps_for_tests as t
    from marin.execution.step import Step
    from marin.execution.step_runner import StepRunner

    if __name__ == "__main__":
        prefix, counter = sys.argv[1], sys.argv[2]
        step = Step("lost/alone", t.ticker, t.TickConfig(counter_dir=counter))
        result = StepRunner(prefix=prefix, lease_ttl=float(sys.argv[3]), poll_interval=0.02).run([step])
        print(json.dumps({s.name: [s.outcome.name, s.note] for s in result.steps}))
        raise SystemExit(0 if result.ok else 1)
""")


def test_a_step_whose_runner_is_frozen_stops_itself_when_its_lease_is_lost(tmp_path, counter, subprocess_env):
    # Only the runner is frozen (its machine stalls; on Ray its step runs on another node): it can
    # neither renew the lease nor stop its step, so the step watches the lease itself and ends once
    # another runner takes it over. Nothing else here would stop it (the thief is this test).
    prefix = str(tmp_path / "store")
    script = tmp_path / "runner.py"
    script.write_text(FROZEN_RUNNER)
    proc = subprocess.Popen([sys.executable, str(script), prefix, counter, "2.0"], env=subprocess_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    step = Step("lost/alone", t.ticker, t.TickConfig(counter_dir=counter))
    record = StepRecord(os.path.join(prefix, step.output_name))
    runner = psutil.Process(proc.pid)
    try:
        _wait_for(lambda: _pid(counter) is not None or proc.poll() is not None, 120, "the step to start")
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        process = psutil.Process(_pid(counter))
        runner.suspend()
        thief = take_over(record.meta)
        token = thief.token
        taken = time.monotonic()
        process.wait(timeout=30)  # ended by itself, long before its 60 s
        stopped_after = time.monotonic() - taken
        # The thief gives the step up and the runner comes back: it builds the step again.
        thief.release()
        runner.resume()
        out, err = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            runner.resume()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["lost/alone"][0] == "RAN"
    assert t.calls(counter)["ticker"] == 2
    # Within two of the watch's periods (ttl / 4), with room for a loaded machine.
    assert stopped_after < 2 * 2.0 / 4 + 5, stopped_after
    assert "was taken over" in fs.read_text(record.log)
    lost = record.read_json(record.lost(token - 1))
    assert lost is not None and lost["state"] == "lost"
    assert record.read_status().error is None


FINDS_THE_CHIP_HELD = textwrap.dedent("""
    import pickle, sys, time
    import accelerator_steps as chip
    from marin.execution.run.worker import FnRef, StepPayload, run_step
    from rigging.lease import Lease

    folder, lock, output = sys.argv[1:4]
    lease = Lease.acquire(folder, ttl=0.5)  # never renewed: its watch finds it lost within the second
    payload = StepPayload("chip/held", FnRef.of(chip.tpu_step), pickle.dumps(chip.ChipConfig("held", lock=lock)),
                          output, None, lease=(folder, lease.token, 0.5), opens_accelerator=True)
    try:
        run_step(payload)
    except Exception as e:
        print("ended:", type(e).__name__, flush=True)
    time.sleep(1.0)  # the step is over; a warm process would be putting itself back for the next one
    print("alive", flush=True)
""")


def test_a_step_that_found_the_chip_held_is_over_and_its_lost_lease_ends_no_process(tmp_path, subprocess_env):
    # A warm accelerator process outlives its steps: a step's lease lost after the step ended (here
    # by failing to open the chip, before its function ran) must not kill the process.
    script = tmp_path / "held.py"
    script.write_text(FINDS_THE_CHIP_HELD)
    lock = str(tmp_path / "libtpu_lockfile")
    holder = hold_lock(lock, 60)
    try:
        proc = subprocess.run([sys.executable, str(script), str(tmp_path / "lease"), lock, str(tmp_path / "out")],
                              env=subprocess_env, capture_output=True, text=True, timeout=120)
    finally:
        holder.kill()
        holder.communicate()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == ["ended: AcceleratorUnavailable", "alive"]
