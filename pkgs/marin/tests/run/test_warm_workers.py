"""Local steps run in processes forked from a warm worker (fray.pool): a crash fails that step
alone, state left by one step never reaches the next, accelerator steps get a fresh interpreter."""

from __future__ import annotations

import json
import os

import steps_for_tests as t

from iris.cluster import ResourceConfig
from marin.execution.core.step import Step
from marin.execution.run.attempt_context import warm_worker_can_run
from marin.execution.run.outcome import Outcome
from marin.execution.run.runner import StepRunner
from marin.execution.store.records import StepRecord
from rigging import filesystem as fs
from rigging.config.discovery import Backend
from rigging.pids import ProcessPlace
from rigging.process import running


def _runner(prefix: str, **kwargs) -> StepRunner:
    return StepRunner(prefix=prefix, max_parallel=1, strict_env=False, backend=Backend.LOCAL, poll_interval=0.02,
                      **kwargs)


def _seen(result, name: str) -> dict:
    return json.loads(fs.read_text(fs.join(result.by_name(name).output_path, "seen.json")))


def test_state_left_by_one_step_is_not_seen_by_the_next(tmp_path):
    leak = Step(name="warm/leak", fn=t.warm_step, config=t.WarmConfig("leak", tag="x"))
    look = Step(name="warm/look", fn=t.warm_step, config=t.WarmConfig("look"))
    after = Step(name="warm/after", fn=t.warm_step, config=t.WarmConfig("look", tag="after"))
    runner = _runner(str(tmp_path / "store"))
    try:
        first = runner.run([leak])
        second = runner.run([look, after])
    finally:
        runner.close()
    assert first.ok and second.ok
    leaked, looked, later = _seen(first, "warm/leak"), _seen(second, "warm/look"), _seen(second, "warm/after")
    assert leaked["globals"] == ["x"] and "leaked-x" in leaked["threads"]
    for seen in (looked, later):
        assert seen["globals"] == [] and not any(n.startswith("leaked-") for n in seen["threads"])
    # Each step had a process of its own, forked from one warm worker (not a fresh interpreter).
    assert len({leaked["pid"], looked["pid"], later["pid"], os.getpid()}) == 4
    assert leaked["ppid"] == looked["ppid"] == later["ppid"] != os.getpid()


def test_a_step_that_kills_its_process_fails_alone(tmp_path):
    crash = Step(name="warm/crash", fn=t.warm_step, config=t.WarmConfig("crash"))
    fine = Step(name="warm/fine", fn=t.warm_step, config=t.WarmConfig("look", tag="fine"))
    runner = _runner(str(tmp_path / "store"))
    try:
        result = runner.run([crash, fine])
        again = runner.run([Step(name="warm/again", fn=t.warm_step, config=t.WarmConfig("look", tag="again"))])
        templates = runner.backends.pool.templates_started
    finally:
        runner.close()
    crashed = result.by_name("warm/crash")
    assert crashed.outcome is Outcome.FAILED and "exit code 9" in (crashed.error or "")
    assert not StepRecord(crashed.output_path).is_done()  # its half-written output is not done
    assert result.by_name("warm/fine").outcome is Outcome.RAN
    assert again.ok
    # The warm worker that forked the crashed step was replaced once, and only once.
    assert templates == 2


def test_a_warm_worker_is_replaced_after_the_configured_number_of_steps(tmp_path):
    from rigging.config.discovery import MarinConfig

    looks = [Step(name=f"warm/n{i}", fn=t.warm_step, config=t.WarmConfig("look", tag=f"n{i}")) for i in range(5)]
    runner = StepRunner(MarinConfig(warm_worker_max_steps=2), prefix=str(tmp_path / "store"), max_parallel=1,
                        strict_env=False, backend=Backend.LOCAL, poll_interval=0.02)
    try:
        result = runner.run(looks)
        templates = runner.backends.pool.templates_started
    finally:
        runner.close()
    assert result.ok
    assert templates == 3  # 2 + 2 + 1 steps
    assert len({_seen(result, s.name)["ppid"] for s in looks}) == 3


def test_accelerator_and_multihost_steps_get_a_fresh_interpreter():
    assert warm_worker_can_run(ResourceConfig())
    assert warm_worker_can_run(ResourceConfig.with_cpu(2, memory="1GiB"))
    assert not warm_worker_can_run(ResourceConfig.with_gpu("H100", 1))
    assert not warm_worker_can_run(ResourceConfig.with_tpu("v5e-8"))
    assert not warm_worker_can_run(ResourceConfig.with_cpu(1, hosts=2))


def test_without_warm_workers_each_step_is_a_fresh_interpreter(tmp_path):
    looks = [Step(name=f"cold/look{i}", fn=t.warm_step, config=t.WarmConfig("look", tag=str(i))) for i in range(2)]
    runner = _runner(str(tmp_path / "store"), warm_workers=False)
    try:
        result = runner.run(looks)
    finally:
        runner.close()
    assert result.ok
    parents = {_seen(result, s.name)["ppid"] for s in looks}
    assert parents == {os.getpid()}  # spawned by the runner itself, one interpreter per step


def test_ctrl_c_of_the_runner_ends_the_warm_step_and_leaves_nothing_done(tmp_path, counter, subprocess_env):
    import signal
    import subprocess
    import sys
    import textwrap
    import time


    prefix = str(tmp_path / "store")
    script = tmp_path / "interrupted.py"
    script.write_text(textwrap.dedent(f"""
        import faulthandler, signal
        import steps_for_tests as t
        from marin.execution.step_runner import StepRunner
        from rigging.config.discovery import Backend

        if __name__ == "__main__":
            faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks for stacks if it hangs
            # Ctrl-C as a terminal gives it: a process started by one that ignores SIGINT inherits
            # that (Python then leaves it ignored), and something earlier in a full test session
            # leaves the pytest process so; the runner then never saw the signal.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            slow = t.node("ctrl-c/slow", {counter!r}, sleep=60)
            StepRunner(prefix={prefix!r}, max_parallel=1, strict_env=False, backend=Backend.LOCAL,
                       poll_interval=0.02, warm_workers=True).run([slow])
    """))
    proc = subprocess.Popen([sys.executable, str(script)], env=subprocess_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    slow = t.node("ctrl-c/slow", counter, sleep=60)
    record = StepRecord(fs.join(prefix, slow.output_name))
    try:
        deadline = time.monotonic() + 60
        while t.calls(counter)["ctrl-c.slow"] < 1:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the slow step never started"
            time.sleep(0.05)
        place = ProcessPlace.from_text(record.read_json(record.status)["worker"].partition(":")[2])
        assert place is not None
        worker = place.pid
        proc.send_signal(signal.SIGINT)
        try:
            _out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)
            time.sleep(1.0)
            proc.kill()
            _out, err = proc.communicate()
            raise AssertionError("the interrupted runner did not end; its threads:\n" + err.decode()[-8000:]) from None
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and "KeyboardInterrupt" in err.decode()
    assert not record.is_done()
    assert record.read_json(record.status)["state"] == "interrupted"
    deadline = time.monotonic() + 10
    while running(worker):
        assert time.monotonic() < deadline, "the step's process outlived the interrupted runner"
        time.sleep(0.05)


def test_jax_steps_on_a_host_without_an_accelerator_run_one_after_another_in_one_warm_process(tmp_path, lm_data_prefix):
    """Training steps compute with JAX, which the warm pool's template never imports: on a CPU host
    they run in a warm process of their own that keeps JAX imported, the next step in the same one."""
    from levanter.checkpoint import committed_steps
    from testsupport.lm_graph import copy_prefix, tiny_model

    prefix = copy_prefix(lm_data_prefix, tmp_path / "store")
    first = tiny_model("checkpoints/warm", steps=20)
    second = tiny_model("checkpoints/warm-again", steps=10)
    runner = _runner(str(prefix))
    try:
        result = runner.run([first, second])
        processes = runner.backends.accelerator_processes
        started, pool = processes.started_on_cpu, runner.backends.pool
    finally:
        runner.close()
    assert result.ok, [(s.name, s.error) for s in result.failed]
    assert started == 1  # both steps ran in the one warm process, not each in an interpreter of its own
    assert pool is None  # and neither was forked from the template
    workers = {StepRecord(result.by_name(n).output_path).read_json(StepRecord(result.by_name(n).output_path).status)["worker"]
               for n in ("checkpoints/warm", "checkpoints/warm-again")}
    assert len(workers) == 1, workers
    assert committed_steps(fs.join(result.by_name("checkpoints/warm").output_path, "checkpoints")) == [10, 20]
    assert committed_steps(fs.join(result.by_name("checkpoints/warm-again").output_path, "checkpoints")) == [10]
