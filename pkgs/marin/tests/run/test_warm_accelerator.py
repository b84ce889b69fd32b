"""Accelerator steps run one after another in a warm process that keeps the (simulated) accelerator
open, each as if alone; a step that leaves something behind retires the process.

The accelerator is the simulated one of ``test_accelerator`` (a stated ``v5e-1`` and a lock file
each accelerator step takes as libtpu takes its own); the steps compute a little with JAX on the CPU.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import accelerator_steps as chip
import pytest

from marin.execution.core.placeholders import output_path_of
from marin.execution.run.outcome import Outcome
from marin.execution.run.runner import StepRunner
from marin.execution.store.records import StepRecord
from marin.execution.store.verify import verify_output
from rigging.config.discovery import Backend
from rigging.process import running


def _runner(tmp_path, store: str, **settings) -> StepRunner:
    settings = {"accelerator": "v5e-1", "accelerator_lock": str(tmp_path / "libtpu_lockfile"),
                "accelerator_wait": 60.0, "compilation_cache": str(tmp_path / "jax-cache"), **settings}
    return StepRunner(prefix=str(tmp_path / store), strict_env=False, backend=Backend.LOCAL, poll_interval=0.02,
                      **settings)


def _run(tmp_path, store: str, steps, **settings):
    runner = _runner(tmp_path, store, **settings)
    try:
        return runner.run(steps)
    finally:
        runner.close()


def _graph(tmp_path, records: str):
    lock = str(tmp_path / "libtpu_lockfile")
    tpus = [chip.jax_chip(f"t{i}", records, lock, seed=i) for i in range(6)]
    cpus = [chip.cpu(f"c{i}", records, seconds=0.05) for i in range(4)]
    return [s for pair in zip(tpus, cpus, strict=False) for s in pair] + tpus[len(cpus):]


def _outputs(result) -> dict[str, bytes]:
    found = {}
    for s in result.steps:
        name = "out.bin" if s.name.startswith("chip/") else "out.txt"
        with open(os.path.join(s.output_path, name), "rb") as f:
            found[os.path.basename(s.output_path)] = f.read()
    return found


def test_six_accelerator_steps_run_in_one_warm_process_alone_with_outputs_identical_to_fresh(
        tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("JAX_PLATFORMS", "")  # the user's own setting (JAX chooses: the CPU here)
    warm_records, fresh_records = tmp_path / "warm-records", tmp_path / "fresh-records"
    warm_records.mkdir()
    fresh_records.mkdir()
    with caplog.at_level(logging.INFO):
        warm = _run(tmp_path, "warm", _graph(tmp_path, str(warm_records)), max_parallel=4)
    assert warm.ok, [(s.name, s.error) for s in warm.failed]
    # The run said, as it started, how its accelerator steps run and where compiled programs are kept.
    said = [r.getMessage() for r in caplog.records if "accelerator_process" in r.getMessage()]
    assert len(said) == 1 and "warm process" in said[0] and "(accelerator_process: warm, default)" in said[0]
    assert f"compiled programs kept in {tmp_path / 'jax-cache'}" in said[0]
    seen = chip.read_records(str(warm_records))
    accelerator = [r for r in seen.values() if r["kind"] == "accelerator"]
    assert len(accelerator) == 6
    assert {r["cache_dir"] for r in accelerator} == {str(tmp_path / "jax-cache")}  # each step was given it
    # One process ran the six, started by the runner, not forked from the CPU steps' warm pool.
    assert len({r["pid"] for r in accelerator}) == 1 and {r["ppid"] for r in accelerator} == {os.getpid()}
    assert accelerator[0]["pid"] not in {r["pid"] for r in seen.values() if r["kind"] == "cpu"}
    spans = sorted((r["start"], r["end"]) for r in accelerator)
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end  # never two at once
    # Each step's log holds its own printed and logged lines, and nobody else's.
    for s in warm.steps:
        if not s.name.startswith("chip/"):
            continue
        label = s.name.split("/")[1]
        with open(s.log_path) as f:
            text = f.read()
        assert f"stdout line of {label}" in text and f"log line of {label}" in text, text
        others = [i for i in range(6) if f"t{i}" != label and f"of t{i}\n" in text]
        assert not others, (label, text)
    # The first and the last of them (which ran after five others in the same process), each in a
    # fresh process: the same step hashes, the same bytes (a fresh interpreter per step costs
    # seconds, so not all six).
    ends = [s for s in _graph(tmp_path, str(fresh_records)) if s.name in ("chip/t0", "chip/t5")]
    fresh = _run(tmp_path, "fresh", ends, max_parallel=4, accelerator_process="fresh")
    assert fresh.ok, [(s.name, s.error) for s in fresh.failed]
    fresh_seen = chip.read_records(str(fresh_records))
    assert len({r["pid"] for r in fresh_seen.values()}) == 2
    fresh_outputs = _outputs(fresh)
    assert len(fresh_outputs) == 2 and fresh_outputs.items() <= _outputs(warm).items()


def test_a_step_that_leaves_an_array_retires_the_process_and_one_that_sets_a_jax_flag_does_not_change_the_next(
        tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("JAX_PLATFORMS", "")
    records, lock = str(tmp_path / "records"), str(tmp_path / "libtpu_lockfile")
    os.mkdir(records)
    flag = chip.jax_chip("flag", records, lock, enable_x64=True)
    after_flag = chip.jax_chip("after-flag", records, lock, after=output_path_of(flag))
    # It holds on a while: long enough for the earlier steps' leases, released, to be seen so by
    # the process's lease watchers (a short lease_ttl), which must not end it for that.
    leak = chip.jax_chip("leak", records, lock, leave_array=True, hold_s=1.5, after=output_path_of(after_flag))
    after_leak = chip.jax_chip("after-leak", records, lock, after=output_path_of(leak))
    with caplog.at_level(logging.WARNING, logger="marin.execution.step_runner"):
        result = _run(tmp_path, "store", [after_leak], max_parallel=2, lease_ttl=2.0)
    assert result.ok, [(s.name, s.error) for s in result.failed]
    seen = chip.read_records(records)
    # The flag was on in its own step only; the next step, in the same process, had the default.
    assert seen["flag"]["default_dtype"] == "float64" and seen["after-flag"]["default_dtype"] == "float32"
    assert seen["flag"]["pid"] == seen["after-flag"]["pid"] == seen["leak"]["pid"]
    # The array left alive retired the process: the next step ran in a new one, and one warning said why.
    assert seen["after-leak"]["pid"] != seen["leak"]["pid"]
    lines = [r.getMessage() for r in caplog.records if "retires after" in r.getMessage()]
    assert len(lines) == 1 and "chip/leak-" in lines[0] and "1 live array" in lines[0] and "\n" not in lines[0], lines


def test_sigkill_of_the_warm_process_mid_step_loses_that_attempt_only(tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "")
    records, lock = str(tmp_path / "records"), str(tmp_path / "libtpu_lockfile")
    os.mkdir(records)
    first = chip.jax_chip("first", records, lock)
    held = chip.jax_chip("held", records, lock, hold_s=60.0, after=output_path_of(first))
    beside = chip.cpu("beside", records, seconds=0.05)
    runner = _runner(tmp_path, "store", max_parallel=2)
    done: dict[str, object] = {}
    thread = threading.Thread(target=lambda: done.setdefault("result", runner.run([held, beside])))
    thread.start()
    try:
        marker = os.path.join(records, "held.held")
        deadline = time.monotonic() + 120
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.path.exists(marker), "the step never started"
        with open(os.path.join(records, "held.runs")) as f:
            warm_pid = int(f.read().split()[0])
        os.kill(warm_pid, signal.SIGKILL)
        thread.join(timeout=120)
    finally:
        runner.close()
    result = done["result"]
    held_outcome = result.by_name("chip/held")
    # That attempt was lost (its process died, not its code); the steps beside and before it were not.
    assert held_outcome.outcome is Outcome.FAILED and "lost" in (held_outcome.error or "")
    assert result.by_name("chip/first").outcome is Outcome.RAN and result.by_name("data/beside").outcome is Outcome.RAN
    again = _run(tmp_path, "store", [held, beside], max_parallel=2)
    assert again.ok and again.by_name("chip/held").outcome is Outcome.RAN
    assert again.by_name("chip/first").outcome is Outcome.CACHED
    # Nothing ran twice but the step whose attempt was lost.
    runs = {label: open(os.path.join(records, f"{label}.runs")).read().split() for label in ("first", "held")}
    assert len(runs["first"]) == 1 and len(runs["held"]) == 2
    assert StepRecord(again.by_name("chip/held").output_path).read_status().attempt == 2
    for s in again.steps:
        assert not verify_output(s.name, s.output_path).verdict.is_problem


def test_the_compilation_cache_is_the_users_unless_the_configuration_or_jax_s_own_variable_says_otherwise(tmp_path):
    from marin.execution.run.settings import RunSettings
    from marin.execution.run.warm_accelerator import compilation_cache_env

    def env_of(environ, **settings):
        return compilation_cache_env(RunSettings(prefix=str(tmp_path), **settings), environ)

    assert env_of({"XDG_CACHE_HOME": "/xdg"}) == {"JAX_COMPILATION_CACHE_DIR": "/xdg/marin/jax"}
    assert env_of({"JAX_COMPILATION_CACHE_DIR": "/mine"}) == {}  # kept as the environment has it
    assert env_of({"JAX_COMPILATION_CACHE_DIR": "/mine"}, compilation_cache="/set") == {"JAX_COMPILATION_CACHE_DIR": "/set"}
    assert env_of({}, compilation_cache="off") == {} and env_of({}, compilation_cache="OFF") == {}


@pytest.mark.parametrize("value", ["lukewarm", ""])
def test_a_bad_accelerator_process_is_refused_naming_the_setting(tmp_path, value):
    from rigging.config.discovery import ConfigError, discover_config

    with pytest.raises(ConfigError, match="MARIN_ACCELERATOR_PROCESS.*warm, fresh"):
        discover_config(environ={"MARIN_ACCELERATOR_PROCESS": value}, cwd=tmp_path, user_config=tmp_path / "none")


def test_ctrl_c_of_the_runner_records_the_warm_step_interrupted_and_ends_the_warm_process(tmp_path, subprocess_env):
    import subprocess
    import sys
    import textwrap

    records, lock, prefix = str(tmp_path / "records"), str(tmp_path / "libtpu_lockfile"), str(tmp_path / "store")
    os.mkdir(records)
    script = tmp_path / "interrupted.py"
    script.write_text(textwrap.dedent(f"""
        import signal
        import accelerator_steps as chip
        from marin.execution.core.placeholders import output_path_of
        from marin.execution.step_runner import StepRunner
        from rigging.config.discovery import Backend

        if __name__ == "__main__":
            signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal's Ctrl-C reaches it
            quick = chip.jax_chip("quick", {records!r}, {lock!r})
            held = chip.jax_chip("held", {records!r}, {lock!r}, hold_s=60.0, after=output_path_of(quick))
            StepRunner(prefix={prefix!r}, max_parallel=2, strict_env=False, backend=Backend.LOCAL, poll_interval=0.02,
                       accelerator="v5e-1", accelerator_lock={lock!r}, compilation_cache="off").run([held])
    """))
    proc = subprocess.Popen([sys.executable, str(script)], env={**subprocess_env, "JAX_PLATFORMS": ""},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(records, "held.held")):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the held step never started"
            time.sleep(0.05)
        with open(os.path.join(records, "held.runs")) as f:
            warm_pid = int(f.read().split()[0])
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    said = err.decode()[-4000:]
    assert proc.returncode != 0 and "KeyboardInterrupt" in said, said
    quick_pid = chip.read_records(records)["quick"]["pid"]
    assert quick_pid == warm_pid, said  # the two ran in one warm process
    [held_folder] = [os.path.join(prefix, "chip", d) for d in os.listdir(os.path.join(prefix, "chip"))
                     if d.startswith("held-")]
    record = StepRecord(held_folder)
    status = record.read_json(record.status)
    assert not record.is_done() and status["state"] == "interrupted", (status, said)
    deadline = time.monotonic() + 10
    while running(warm_pid):
        assert time.monotonic() < deadline, "the warm process outlived the interrupted runner"
        time.sleep(0.05)
