"""Several runners on one graph, killed runners, stale leases: each step is built exactly once,
and nothing that was interrupted ever looks done."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import steps_for_tests as t

from marin.execution.plan.model import ReasonKind
from marin.execution.run.outcome import Outcome
from marin.execution.run.runner import StepRunner
from marin.execution.store.records import StepRecord
from marin.execution.store.store import StepStore
from rigging.lease import Lease

RUNNER_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import steps_for_tests as t
    from marin.execution.step_runner import StepRunner

    def graph(counter):
        if sys.argv[3] == "diamond":
            g = t.diamond(counter, a={"sleep": 0.4}, b={"sleep": 0.3}, c={"sleep": 0.3})
            return [g["d"], g["e"]]
        a = t.node("k/a", counter)
        slow = t.node("k/slow", counter, a, sleep=60)
        return [t.node("k/z", counter, slow)]

    if __name__ == "__main__":
        prefix, counter = sys.argv[1], sys.argv[2]
        ttl = 5.0 if sys.argv[3] == "diamond" else 60.0
        result = StepRunner(prefix=prefix, max_parallel=2, lease_ttl=ttl, poll_interval=0.05).run(graph(counter))
        print(json.dumps({s.name: [s.outcome.name, s.note] for s in result.steps}))
        raise SystemExit(0 if result.ok else 1)
    """
)


def _script(tmp_path) -> str:
    path = tmp_path / "race_runner.py"
    path.write_text(RUNNER_SCRIPT)
    return str(path)


def test_four_runners_racing_build_each_step_once(tmp_path, counter, subprocess_env):
    prefix = str(tmp_path / "store")
    script = _script(tmp_path)
    procs = [subprocess.Popen([sys.executable, script, prefix, counter, "diamond"], env=subprocess_env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        outputs.append(json.loads(out.strip().splitlines()[-1]))
    assert t.calls(counter) == {"g.a": 1, "g.b": 1, "g.c": 1, "g.d": 1, "g.e": 1}
    for name in ("g/a", "g/b", "g/c", "g/d", "g/e"):
        outcomes = [o[name][0] for o in outputs]
        assert outcomes.count("RAN") == 1, (name, outcomes)
        assert set(outcomes) <= {"RAN", "CACHED"}
    # Runners that waited used the result another one built.
    notes = [o[name][1] for o in outputs for name in o if o[name][0] == "CACHED"]
    assert "built by another runner" in notes


def test_a_runner_killed_mid_step_is_redone_on_the_next_run(tmp_path, counter, subprocess_env):
    prefix = str(tmp_path / "store")
    proc = subprocess.Popen([sys.executable, _script(tmp_path), prefix, counter, "kill"], env=subprocess_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while t.calls(counter)["k.slow"] < 1:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the slow step never started"
            time.sleep(0.05)
        time.sleep(0.3)  # well inside its 60 s sleep
    finally:
        proc.kill()
        proc.communicate()

    a = t.node("k/a", counter)
    slow = t.node("k/slow", counter, a, sleep=60)
    z = t.node("k/z", counter, slow)
    record = StepRecord(StepStore(prefix).output_path(slow.output_name))
    assert not record.is_done()
    assert record.read_json(record.status)["state"] == "running"
    # Its worker does not outlive the runner: nothing more happens to the output.
    time.sleep(1.0)
    assert not record.is_done()

    runner = StepRunner(prefix=prefix, max_parallel=2, lease_ttl=30.0, poll_interval=0.02)
    plan = {p.name: p for p in runner.plan([z]).steps}
    assert [r.kind for r in plan["k/slow"].reasons] == [ReasonKind.EARLIER_KILLED]
    assert [r.kind for r in plan["k/z"].reasons] == [ReasonKind.NEW]  # never built

    # The killed runner's lease has most of its 60 s left, but its holder is gone: taken over at once.
    started = time.monotonic()
    result = runner.run([z])
    assert result.ok, [(s.name, s.error) for s in result.steps]
    assert {s.name: s.outcome for s in result.steps} == {
        "k/a": Outcome.CACHED, "k/slow": Outcome.RAN, "k/z": Outcome.RAN}
    assert time.monotonic() - started < 30
    assert t.calls(counter) == {"k.a": 1, "k.slow": 2, "k.z": 1}
    assert record.is_done()
    assert record.read_json(record.provenance)["attempts"] == 2
    # The partial output of the killed attempt was kept for the next attempt to resume from.
    assert (tmp_path / "store" / slow.output_name / "partial.txt").exists()


def test_an_expired_lease_of_another_host_is_taken_over(tmp_path, counter):
    prefix = str(tmp_path / "store")
    step = t.node("stale/x", counter)
    record = StepRecord(StepStore(prefix).output_path(step.output_name))
    # A runner on another machine took the step and stopped heartbeating: its lease expires.
    assert Lease.acquire(record.meta, ttl=1.0, holder="otherhost:4242:gone") is not None
    started = time.monotonic()
    result = StepRunner(prefix=prefix, max_parallel=1, poll_interval=0.02).run([step])
    assert result.ok and result.steps[0].outcome is Outcome.RAN
    assert time.monotonic() - started >= 0.5  # it waited for the expiry
    assert t.calls(counter) == {"stale.x": 1}


def test_a_waiting_runner_uses_the_result_of_the_live_holder(tmp_path, counter):
    """A lease held live elsewhere is never stolen: the runner waits and takes the published result."""
    import threading

    prefix = str(tmp_path / "store")
    step = t.node("wait/x", counter)
    record = StepRecord(StepStore(prefix).output_path(step.output_name))
    other = Lease.acquire(record.meta, ttl=30.0, holder="otherhost:7:busy")
    assert other is not None

    def publish_later() -> None:
        time.sleep(0.8)
        from rigging import filesystem as fs

        fs.atomic_write(fs.join(record.output_path, "out.txt"), "built elsewhere")
        fs.create_if_absent(record.success, json.dumps({"hash": step.hash, "finished_at": time.time()}))
        other.release()

    thread = threading.Thread(target=publish_later)
    thread.start()
    try:
        result = StepRunner(prefix=prefix, max_parallel=1, poll_interval=0.02).run([step])
    finally:
        thread.join()
    assert result.ok
    assert result.steps[0].outcome is Outcome.CACHED
    assert result.steps[0].note == "built by another runner"
    assert t.calls(counter) == {}
