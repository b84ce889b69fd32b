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

from marin.execution.store.records import LOST_PREFIX, StepRecord
from marin.execution.store.store import StepStore
from marin.execution.store.verify import Verdict, verify_output
from rigging import filesystem as fs
from rigging.lease import current_lease

pytestmark = pytest.mark.slow

LEASE_TTL_S = 2.0
STEPS = 4

RUNNER = textwrap.dedent(f"""
    import json, sys
    import steps_for_tests as t
    from marin.execution.step_runner import StepRunner

    if __name__ == "__main__":
        prefix, counter = sys.argv[1], sys.argv[2]
        runner = StepRunner(prefix=prefix, max_parallel=1, lease_ttl={LEASE_TTL_S}, poll_interval=0.05)
        result = runner.run(t.scribble_fan(counter, width={STEPS}))
        print(json.dumps({{s.name: [s.outcome.name, s.note] for s in result.steps}}))
        raise SystemExit(0 if result.ok else 1)
""")


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
        time.sleep(0.05)


def test_a_frozen_runner_revived_after_its_step_was_published_changes_nothing(
        tmp_path: Path, strict_gcs_bucket: str, subprocess_env: dict[str, str]):
    prefix = strict_gcs_bucket + "/store"
    counter = str(tmp_path / "counter")
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    store = StepStore(prefix)
    outputs = {s.name: store.output_path(s.output_name) for s in t.scribble_fan(counter, width=STEPS)}
    records = {name: StepRecord(path) for name, path in outputs.items()}
    procs = [subprocess.Popen([sys.executable, str(script), prefix, counter], env=subprocess_env,
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

        by_pid[killed_pid].send_signal(signal.SIGKILL)
        frozen = _tree(frozen_pid)
        assert len(frozen) >= 2, "the frozen runner has no step process under it"
        _signal_tree(frozen, signal.SIGSTOP)
        # Another runner takes the frozen one's step over once its lease expires, builds and publishes it.
        _wait(lambda: records[frozen_step].is_done(), 180, f"{frozen_step} published by another runner", procs)
        time.sleep(0.5)
        # The step processes first, the runner last: the worst order a revived machine can give.
        _signal_tree(frozen[::-1], signal.SIGCONT)
        frozen = []

        results = {}
        for proc in procs:
            out, err = proc.communicate(timeout=240)
            if proc.pid == killed_pid:
                assert proc.returncode == -9
                continue
            assert proc.returncode == 0, err[-3000:]
            results[proc.pid] = json.loads(out.strip().splitlines()[-1])
    finally:
        _signal_tree(frozen, signal.SIGCONT)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()

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
