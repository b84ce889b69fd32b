"""Runners racing on gs:// (the strict emulator) while one is SIGKILLed and another is frozen
(SIGSTOP of the runner and every process under it) past its lease's expiry, then revived (SIGCONT)
after another runner built and published its step, as a preempted machine comes back: each step
is published once, the revived runner writes no success record, and every published output stays
as its manifest describes it (``marin verify`` clean)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import steps_for_tests as t

from marin.execution.store.records import LOST_PREFIX, StepRecord, SuccessRecord
from marin.execution.store.store import StepStore
from marin.execution.store.verify import Verdict, verify_output
from rigging import filesystem as fs
from rigging.lease import current_lease
from testsupport.leases import place_elsewhere

pytestmark = pytest.mark.slow

LEASE_TTL_S = 2.0
STEPS = 4
STEP_S = 120.0
"""The longest a step runs: until the test has frozen (and killed) what it waits to see running, it
creates the steps' ``until`` file (``GO``), and every step ends at its next write. So a step is
still running when it is frozen however slow the machine, and nothing waits for a fixed time."""
GO = "go"
"""The ``until`` file of the steps (in the test's folder): created once the test froze its runner."""
EVERY_S = 0.1
"""How often a step rewrites its file: often enough that a revived step writes within its watch's
period (a quarter of the lease), no more (each write is a request to the emulator)."""
POLL_S = 0.2
"""How often the runners and this test look at the store while they wait (each look is requests)."""
ARGS = f"seconds={STEP_S}, every={EVERY_S}, until=sys.argv[3]"



def _runner(graph: str) -> str:
    """A runner script building ``graph`` (an expression of ``counter``) under short leases."""
    return textwrap.dedent(f"""
        import json, sys
        import steps_for_tests as t
        from marin.execution.step_runner import StepRunner

        if __name__ == "__main__":
            prefix, counter = sys.argv[1], sys.argv[2]  # sys.argv[3]: the steps' until file
            runner = StepRunner(prefix=prefix, max_parallel=1, lease_ttl={LEASE_TTL_S}, poll_interval={POLL_S})
            result = runner.run({graph})
            print(json.dumps({{s.name: [s.outcome.name, s.note] for s in result.steps}}))
            raise SystemExit(0 if result.ok else 1)
    """)


RUNNER = _runner(f"t.scribble_fan(counter, width={STEPS}, {ARGS})")


def _holder_pid(holder: str) -> int:
    return int(holder.split(":")[1])


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _signal_tree(processes: list[psutil.Process], sig: signal.Signals) -> None:
    for p in processes:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def _wait(condition, timeout: float, what: str, procs: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for proc in procs:
            if proc.poll() is not None and proc.returncode not in (0, -9):
                raise AssertionError(f"a runner exited with {proc.returncode}: {proc.communicate()[1][-3000:]}")
        time.sleep(POLL_S)


def _finish(procs: list[subprocess.Popen], killed: int | None = None) -> dict[int, dict]:
    """Each runner's outcomes by pid, once all have ended: well, or (``killed``) by SIGKILL."""
    results = {}
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        if proc.pid == killed:
            assert proc.returncode == -9
            continue
        assert proc.returncode == 0, err[-3000:]
        results[proc.pid] = json.loads(out.strip().splitlines()[-1])
    return results


def _clean_up(frozen: list[psutil.Process], procs: list[subprocess.Popen]) -> None:
    """Revive what is still frozen and end the runners still running (a test that failed midway)."""
    _signal_tree(frozen, signal.SIGCONT)
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_frozen_runner_revived_after_its_step_was_published_changes_nothing(
        tmp_path: Path, strict_gcs_bucket: str, subprocess_env: dict[str, str]):
    prefix = strict_gcs_bucket + "/store"
    counter = str(tmp_path / "counter")
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    store = StepStore(prefix)
    go = tmp_path / GO
    outputs = {s.name: store.output_path(s.output_name)
               for s in t.scribble_fan(counter, width=STEPS, seconds=STEP_S, every=EVERY_S, until=str(go))}
    records = {name: StepRecord(path) for name, path in outputs.items()}
    procs = [subprocess.Popen([sys.executable, str(script), prefix, counter, str(go)], env=subprocess_env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    by_pid = {p.pid: p for p in procs}
    frozen: list[psutil.Process] = []
    try:
        def holders() -> dict[str, int]:
            """Step name -> the runner pid holding its newest live lease, for steps being written."""
            out = {}
            for name, record in records.items():
                info = current_lease(record.meta)
                if info is not None and info.live() and _holder_pid(info.holder) in by_pid \
                        and t.calls(counter)[name.replace("/", ".")] >= 1:
                    out[name] = _holder_pid(info.holder)
            return out

        # Two steps running under two different runners.
        _wait(lambda: len(set(holders().values())) >= 2, 120, "two runners each running a step", procs)
        running = holders()
        killed_step, frozen_step = sorted(running, key=lambda n: running[n])[:2]
        if running[killed_step] == running[frozen_step]:
            frozen_step = next(n for n in running if running[n] != running[killed_step])
        killed_pid, frozen_pid = running[killed_step], running[frozen_step]
        frozen_token = current_lease(records[frozen_step].meta).token  # type: ignore[union-attr]

        # The killed runner's step process ends with it (its watchdog sees its parent gone) before
        # any step may end: it must not live to see the go and finish its step's body.
        written = fs.join(outputs[killed_step], "v.txt")
        _wait(lambda: fs.exists(written), 60, f"{killed_step} writing", procs)
        orphan = psutil.Process(int(fs.read_text(written).split()[0]))
        by_pid[killed_pid].send_signal(signal.SIGKILL)
        frozen = _tree(frozen_pid)
        assert len(frozen) >= 2, "the frozen runner has no step process under it"
        _signal_tree(frozen, signal.SIGSTOP)
        _gone, alive = psutil.wait_procs([orphan], timeout=30)
        assert not alive, f"the killed runner's step process {orphan.pid} outlived it"
        go.touch()
        # Another runner takes the frozen one's step over once its lease expires, builds and publishes it.
        _wait(lambda: records[frozen_step].is_done(), 180, f"{frozen_step} published by another runner", procs)
        time.sleep(0.5)
        # The step processes first, the runner last: the worst order a revived machine can give.
        _signal_tree(frozen[::-1], signal.SIGCONT)
        frozen = []

        results = _finish(procs, killed=killed_pid)
    finally:
        _clean_up(frozen, procs)

    calls = t.calls(counter)
    for name in outputs:
        label = name.replace("/", ".")
        # The body ran to its end once per step: the killed and the frozen attempts never finished.
        assert calls[label + ".end"] == 1, (name, calls)
        ran = [pid for pid, r in results.items() if r[name][0] == "RAN"]
        assert len(ran) == 1, (name, results)
        assert {r[name][0] for r in results.values()} <= {"RAN", "CACHED"}, (name, results)
    assert calls[frozen_step.replace("/", ".")] == 2  # the frozen attempt and the one that published
    # The revived runner never published its step: the success record is the winner's.
    frozen_record = records[frozen_step]
    success = frozen_record.read_json(frozen_record.success)
    assert success is not None
    assert results[frozen_pid][frozen_step][0] == "CACHED"
    assert fs.exists(fs.join(frozen_record.meta, f"{LOST_PREFIX}{frozen_token:08d}.json"))
    # What each success record describes is what is in the store, after everything settled.
    time.sleep(1.0)
    for name, path in outputs.items():
        check = verify_output(name, path)
        assert check.verdict is Verdict.OK, (name, check.problems)
        assert fs.read_text(fs.join(path, "v.txt")).endswith(" final")


def test_a_step_revived_on_another_host_writes_nothing_its_successor_published(
        tmp_path: Path, strict_gcs_bucket: str, subprocess_env: dict[str, str]):
    """A step process the new holder cannot end (its status names a process of another host, as a
    step on a suspended machine would) is frozen with its runner past its lease; the new holder
    writes its attempt in a folder of its own, seeded with what the frozen one wrote, and publishes
    it. Revived, the old step writes on into the step's folder before its watches end it: the
    published build, and the step reading it, never see those writes."""
    prefix = strict_gcs_bucket + "/store"
    counter = str(tmp_path / "counter")
    script = tmp_path / "runner.py"
    script.write_text(_runner(f"t.scribble_then_copy(counter, {ARGS})"))
    store = StepStore(prefix)
    go = tmp_path / GO
    (reader,) = t.scribble_then_copy(counter, seconds=STEP_S, every=EVERY_S, until=str(go))
    scribbler = reader.config.source.step
    folder, reader_folder = store.output_path(scribbler.output_name), store.output_path(reader.output_name)
    record = StepRecord(folder)

    def start() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(script), prefix, counter, str(go)], env=subprocess_env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    first = start()
    procs, frozen = [first], []
    # The step runs until the go, which comes once it is frozen: it is frozen mid-run, however slow the machine.
    try:
        _wait(lambda: t.calls(counter)["apart.s"] >= 1 and "worker" in (record.read_json(record.status) or {})
              and fs.exists(fs.join(folder, "v.txt")), 120, "the first runner's step writing", procs)
        old_pid = int(fs.read_text(fs.join(folder, "v.txt")).split()[0])
        # Its process, as the status names it, is on a machine no other runner can see into.
        assert place_elsewhere(folder)
        old_token = current_lease(record.meta).token  # type: ignore[union-attr]
        frozen = _tree(first.pid)
        assert any(p.pid == old_pid for p in frozen), "the step's process is not under its runner"
        _signal_tree(frozen, signal.SIGSTOP)
        go.touch()  # the second runner's attempt ends at its first write; the frozen one, once revived

        second = start()
        procs.append(second)
        _wait(record.is_done, 180, "the step published by the second runner", procs)
        # The step process first, the runner last: the old step runs before anything can stop it.
        _signal_tree(frozen[::-1], signal.SIGCONT)
        frozen = []
        results = _finish(procs)
    finally:
        _clean_up(frozen, procs)

    assert results[second.pid]["apart/s"][0] == "RAN"
    assert results[first.pid]["apart/s"][0] == "CACHED"
    calls = t.calls(counter)
    # Nothing here could stop the revived process in time (that is the case): its body may have
    # run to its end before its watches ended it, into a folder no record names.
    assert calls["apart.s"] == 2 and calls["apart.s.end"] in (1, 2), calls
    assert fs.exists(fs.join(record.meta, f"{LOST_PREFIX}{old_token:08d}.json"))
    # The winner wrote in its own attempt folder, which the success record names...
    success = record.read_json(record.success) or {}
    apart = record.attempt_folder(old_token + 1)
    assert (SuccessRecord.from_json(success) or SuccessRecord()).attempt_folder == apart
    assert record.files_folder() == fs.join(folder, apart)
    published = fs.read_text(fs.join(folder, apart, "v.txt"))
    assert published.endswith(" final") and int(published.split()[0]) != old_pid
    # ...starting from a copy of what the frozen attempt had written (it could resume from it)...
    assert fs.read_text(fs.join(folder, apart, "start.txt")).startswith(f"{old_pid} ")
    # ...while the old process only ever wrote the step's folder itself, never the published build.
    assert fs.read_text(fs.join(folder, "v.txt")).startswith(f"{old_pid} ")
    time.sleep(1.0)
    for name, path in ((scribbler.name, folder), (reader.name, reader_folder)):
        check = verify_output(name, path)
        assert check.verdict is Verdict.OK, (name, check.problems)
    # The step reading it was handed the published build's folder.
    assert fs.read_text(fs.join(StepRecord(reader_folder).files_folder(), "v.txt")) == published
