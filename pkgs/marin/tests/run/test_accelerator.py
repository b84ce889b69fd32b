"""The accelerator is a capacity the local runner shares: its steps take turns, the others run beside
them with it hidden, and an accelerator held by another process is a wait that names the holder.

The accelerator is simulated (``accelerator_steps``): a lock file taken the way libtpu takes its
own, by each accelerator step for as long as it runs.
"""

from __future__ import annotations

import os

import accelerator_steps as chip
import pytest

from iris.cluster import ResourceConfig
from marin.execution.core.step import Step
from marin.execution.run.outcome import Outcome, QuietReporter
from marin.execution.run.runner import StepRunner
from marin.execution.store.records import BuildState, StepRecord
from rigging.config.discovery import Backend


class _Waits(QuietReporter):
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def accelerator_wait(self, planned, line: str) -> None:
        self.lines.append((planned.name, line))


def _runner(tmp_path, reporter=None, **settings) -> StepRunner:
    settings = {"accelerator": "v5e-1", "accelerator_lock": str(tmp_path / "libtpu_lockfile"),
                "accelerator_wait": 60.0, **settings}
    return StepRunner(prefix=str(tmp_path / "store"), strict_env=False, backend=Backend.LOCAL, poll_interval=0.02,
                      reporter=reporter, **settings)


def test_accelerator_steps_take_turns_cpu_steps_run_beside_them_hidden_and_a_foreign_holder_is_waited_for(
        tmp_path, monkeypatch):
    # The user's own setting (empty: JAX chooses); CI's JAX_PLATFORMS=cpu would look like the hidden one.
    monkeypatch.setenv("JAX_PLATFORMS", "")
    records, lock = tmp_path / "records", str(tmp_path / "libtpu_lockfile")
    records.mkdir()
    tpus = [chip.tpu(f"t{i}", str(records), lock, seconds=0.25) for i in range(4)]
    cpus = [chip.cpu(f"c{i}", str(records), seconds=0.6) for i in range(6)]
    steps = [s for pair in zip(tpus, cpus, strict=False) for s in pair] + cpus[len(tpus):]
    waits = _Waits()
    runner = _runner(tmp_path, waits, max_parallel=4)
    held_s = 1.5  # the run must find it held: its planning and first start come first
    foreign = chip.hold_lock(lock, seconds=held_s)  # another user's process holds the chip as the run starts
    try:
        result = runner.run(steps)
    finally:
        runner.close()
        foreign.kill()
    released = float(foreign.communicate()[0].strip().splitlines()[-1])
    assert result.ok, [(s.name, s.error) for s in result.failed]
    seen = chip.read_records(str(records))
    accelerator = sorted((r["start"], r["end"]) for r in seen.values() if r["kind"] == "accelerator")
    data = [r for r in seen.values() if r["kind"] == "cpu"]
    assert len(accelerator) == 4 and len(data) == 6
    # The accelerator steps never overlap, and none opened the chip before the foreign holder let go.
    for (_, end), (start, _) in zip(accelerator, accelerator[1:], strict=False):
        assert start >= end
    assert accelerator[0][0] >= released
    # The first waited, saying what held the chip: the lock file and the holder's pid.
    assert waits.lines and waits.lines[0][0].startswith("chip/")
    assert f"{lock} is held by pid {foreign.pid}" in waits.lines[0][1]
    # CPU steps ran beside them (while the chip was held, or used by a step of the run).
    busy = [(released - held_s, released), *accelerator]
    assert any(c["start"] < end and start < c["end"] for c in data for start, end in busy)
    # Every CPU step's process saw the accelerator hidden; every accelerator step the user's setting.
    assert {r["JAX_PLATFORMS"] for r in data} == {"cpu"}
    assert {r["JAX_PLATFORMS"] for r in seen.values() if r["kind"] == "accelerator"} == {""}
    # The accelerator steps ran one after another in one warm process the runner started (never a
    # fork of the CPU steps' warm worker); each CPU step in a process of its own forked from that worker.
    assert len({r["pid"] for r in seen.values() if r["kind"] == "accelerator"}) == 1
    assert len({r["pid"] for r in data} | {os.getpid()}) == 7
    assert {r["ppid"] for r in seen.values() if r["kind"] == "accelerator"} == {os.getpid()}
    assert os.getpid() not in {r["ppid"] for r in data}
    assert os.environ["JAX_PLATFORMS"] == "" and "MARIN_ACCELERATOR_ENV" not in os.environ  # put back


class _ReleaseOnWait(_Waits):
    """Ends the foreign holder once the run said it waits for it (no race with a process's start)."""

    def __init__(self, holder) -> None:
        super().__init__()
        self.holder = holder

    def accelerator_wait(self, planned, line: str) -> None:
        super().accelerator_wait(planned, line)
        self.holder.kill()
        self.holder.wait()


def test_a_step_that_finds_the_chip_held_waits_and_runs_again_without_using_a_retry(tmp_path):
    # The runner checks a lock file nobody holds; the step's process, opening the accelerator
    # before its function runs, finds its own held (a holder the runner could not see): libtpu's
    # error at that start is a wait, not a failure.
    records, lock = tmp_path / "records", str(tmp_path / "other_lockfile")
    records.mkdir()
    foreign = chip.hold_lock(lock, seconds=60)
    waits = _ReleaseOnWait(foreign)
    runner = _runner(tmp_path, waits, max_parallel=2)
    try:
        result = runner.run([chip.tpu("t0", str(records), lock, seconds=0.1)])
    finally:
        runner.close()
        foreign.kill()
        foreign.wait()
    assert result.ok and result.steps[0].outcome is Outcome.RAN
    assert any("multi-process lockfile" in line for _, line in waits.lines)
    status = StepRecord(result.steps[0].output_path).read_status()
    assert status.attempt >= 2  # the attempts that found it held are counted, not failed


def test_a_chip_held_past_accelerator_wait_fails_the_step_with_one_line_naming_the_holder(tmp_path):
    records, lock = tmp_path / "records", str(tmp_path / "libtpu_lockfile")
    records.mkdir()
    foreign = chip.hold_lock(lock, seconds=60)
    runner = _runner(tmp_path, max_parallel=2, accelerator_wait=0.5)
    try:
        result = runner.run([chip.tpu("t0", str(records), lock), chip.cpu("c0", str(records), seconds=0.0)])
    finally:
        runner.close()
        foreign.kill()
        foreign.wait()
    failed = result.by_name("chip/t0")
    assert failed.outcome is Outcome.FAILED and result.by_name("data/c0").outcome is Outcome.RAN
    assert "\n" not in failed.error
    assert f"is held by pid {foreign.pid}" in failed.error and "accelerator_wait" in failed.error
    assert "t0" not in chip.read_records(str(records))


def test_a_steps_own_error_that_reads_like_a_held_chip_is_its_failure_with_its_log(tmp_path):
    # The function opened the accelerator and then raised, in words that read like libtpu's and
    # CUDA's: its own failure, at once (no accelerator_wait), recorded failed, its log named.
    records, lock = tmp_path / "records", str(tmp_path / "libtpu_lockfile")
    records.mkdir()
    waits = _Waits()
    runner = _runner(tmp_path, waits, max_parallel=1, accelerator_wait=30.0)
    try:
        result = runner.run([chip.failing_tpu("f0", str(records), lock)])
    finally:
        runner.close()
    [failed] = result.steps
    assert failed.outcome is Outcome.FAILED and waits.lines == []
    assert "the step's own error" in (failed.error or "") and "stayed held" not in (failed.error or "")
    assert failed.log_path is not None and "the step's own error" in open(failed.log_path).read()
    status = StepRecord(failed.output_path).read_status()
    assert status.written is BuildState.FAILED and status.attempt == 1


def test_a_chip_its_process_found_held_past_accelerator_wait_fails_naming_the_log(tmp_path):
    records, lock = tmp_path / "records", str(tmp_path / "other_lockfile")
    records.mkdir()
    foreign = chip.hold_lock(lock, seconds=60)
    runner = _runner(tmp_path, max_parallel=1, accelerator_wait=0.5)
    try:
        result = runner.run([chip.tpu("t0", str(records), lock)])
    finally:
        runner.close()
        foreign.kill()
        foreign.wait()
    [failed] = result.steps
    assert failed.outcome is Outcome.FAILED and "accelerator_wait" in (failed.error or "")
    assert failed.log_path is not None and failed.log_path not in (failed.error or "")  # the CLI names it once
    assert "multi-process lockfile" in open(failed.log_path).read()


def test_a_tpu_asked_for_that_this_host_does_not_have_is_refused_in_one_line_naming_both(tmp_path):
    step = Step("train/big", chip.cpu_step, chip.ChipConfig("big"), resources=ResourceConfig.with_tpu("v5e-8"))
    runner = _runner(tmp_path)
    try:
        with pytest.raises(Exception, match=r"step train/big: asks for TPU v5e-8 \(8 chips\) but this host has "
                                            r"TPU v5e-1 \(1 chip\)") as caught:
            runner.run([step])
    finally:
        runner.close()
    assert "\n" not in str(caught.value)


def test_on_a_host_without_an_accelerator_nothing_is_hidden_or_serialised(tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "")
    records = tmp_path / "records"
    records.mkdir()
    # Each waits for the other to have started: run one after the other, the first would fail.
    steps = [chip.tpu(f"t{i}", str(records), str(tmp_path / f"lock{i}"), seconds=0.0, meets=f"t{1 - i}")
             for i in range(2)]
    runner = _runner(tmp_path, max_parallel=2, accelerator="none")
    try:
        result = runner.run([*steps, chip.cpu("c0", str(records), seconds=0.0)])
    finally:
        runner.close()
    seen = chip.read_records(str(records))
    assert result.ok and {r["JAX_PLATFORMS"] for r in seen.values()} == {""}
    assert seen["t0"]["start"] < seen["t1"]["end"] and seen["t1"]["start"] < seen["t0"]["end"]


def test_the_plan_says_which_steps_use_the_accelerator_and_its_estimate_queues_them(tmp_path, memory_prefix):
    records, lock = tmp_path / "records", str(tmp_path / "libtpu_lockfile")
    records.mkdir()

    def graph(version: str) -> list[Step]:
        tpus = [Step(f"chip/t{i}", chip.tpu_step, chip.ChipConfig(f"t{i}", 0.2, lock=lock, record_dir=str(records)),
                     version=version) for i in range(3)]
        return [*tpus, Step("data/c", chip.cpu_step, chip.ChipConfig("c", 0.2, record_dir=str(records)),
                            version=version)]

    # Its own lock file: /tmp/libtpu_lockfile may be held by a real libtpu on this machine.
    built = StepRunner(prefix=memory_prefix, strict_env=False, accelerator="v5e-1", accelerator_lock=lock, max_parallel=4)
    assert built.run(graph("v1")).ok
    took = {p.name: prov.duration_s for p in built.plan(graph("v1")).steps
            for _, prov in built.store.earlier_builds(p.name)}
    queued = StepRunner(prefix=memory_prefix, strict_env=False, accelerator="v5e-1", accelerator_lock=lock, max_parallel=4)
    estimate = queued.plan(graph("v2"), estimate=True).estimate
    assert {e.name: e.resource for e in estimate.steps.values()} == {"chip/t0": "TPU v5e-1", "chip/t1": "TPU v5e-1",
                                                                     "chip/t2": "TPU v5e-1", "data/c": None}
    one_at_a_time = sum(took[f"chip/t{i}"] for i in range(3))
    assert estimate.wall_s == pytest.approx(one_at_a_time)
    side_by_side = StepRunner(prefix=memory_prefix, strict_env=False, accelerator="none", max_parallel=4)
    assert side_by_side.plan(graph("v2"), estimate=True).estimate.wall_s == pytest.approx(max(took.values()))
