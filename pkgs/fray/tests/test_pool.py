"""The warm worker pool: calls run in processes forked from a template that keeps its imports;
a crash fails alone; state left by one call is never seen by the next."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from fray.pool import PoolConfig, WorkerPool
from fray.types import JobCancelled, JobFailed
from rigging.process import running
from testsupport import fray_jobs


@pytest.fixture
def pool():
    p = WorkerPool(PoolConfig(max_calls=50))
    yield p
    p.shutdown()


def test_calls_share_one_template_and_each_gets_its_own_process(pool):
    handles = [pool.submit(fray_jobs.add, i, 1, scale=2) for i in range(6)]
    assert [h.result(timeout=60) for h in handles] == [2 * (i + 1) for i in range(6)]
    assert pool.templates_started == 1
    pids = {h.pid for h in handles}
    assert len(pids) == 6 and os.getpid() not in pids


def test_calls_are_forked_from_the_template_which_keeps_what_it_imported(pool):
    module = "xml.dom.minidom"  # imported by nothing here
    was_loaded, parent = pool.submit(fray_jobs.loaded, module).result(timeout=60)
    assert not was_loaded
    template = pool._template.process.pid
    assert parent == template  # a fork of the warm template, not a fresh interpreter
    assert pool.submit(fray_jobs.loaded, module, preload=(module,)).result(timeout=60) == (True, template)
    assert pool.submit(fray_jobs.loaded, module).result(timeout=60) == (True, template)
    assert pool.templates_started == 1


def test_a_crashed_call_fails_alone_and_the_next_gets_a_fresh_template(pool):
    assert pool.submit(fray_jobs.square, 3).result(timeout=60) == 9
    for crash, args, code in ((fray_jobs.die_hard, (7,), 7), (fray_jobs.segfault, (), -signal.SIGSEGV)):
        handle = pool.submit(crash, *args, name="crash")
        with pytest.raises(JobFailed) as info:
            handle.result(timeout=60)
        assert info.value.process_died and info.value.exitcode == code
    assert pool.submit(fray_jobs.square, 4).result(timeout=60) == 16
    assert pool.templates_started == 3  # replaced after each failure


def test_an_exception_reaches_the_caller_with_its_traceback_and_log(pool):
    handle = pool.submit(fray_jobs.raise_value_error, "bad input 42", name="bad")
    with pytest.raises(JobFailed, match="ValueError: bad input 42") as info:
        handle.result(timeout=60)
    assert "raise_value_error" in info.value.remote_traceback
    assert "bad input 42" in handle.logs()


def test_a_global_or_thread_left_by_one_call_is_not_seen_by_the_next(pool):
    leaker = pool.submit(fray_jobs.leave_state_behind, "leaked")
    leaker_pid = leaker.result(timeout=60)
    value, threads, pid = pool.submit(fray_jobs.inspect_state).result(timeout=60)
    assert pid != leaker_pid
    assert value is None
    assert "left-behind" not in threads
    assert not running(leaker_pid)
    assert pool.templates_started == 1  # a clean call does not cost a new template


def test_the_template_is_replaced_after_max_calls():
    pool = WorkerPool(PoolConfig(max_calls=2))
    try:
        for i in range(5):
            assert pool.submit(fray_jobs.square, i).result(timeout=60) == i * i
        assert pool.templates_started == 3
    finally:
        pool.shutdown()


def test_env_is_set_for_the_call_only(pool):
    assert pool.submit(fray_jobs.echo_env, "FRAY_POOL_VAR", env={"FRAY_POOL_VAR": "x"}).result(timeout=60) == "x"
    assert pool.submit(fray_jobs.echo_env, "FRAY_POOL_VAR").result(timeout=60) is None


def _blas_in_a_fresh_interpreter(env: dict[str, str]) -> dict:
    code = "import json; from testsupport import fray_jobs; print(json.dumps(fray_jobs.blas_state()))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


@pytest.mark.parametrize("caller", [{}, {"OPENBLAS_NUM_THREADS": "1"}, {"OMP_NUM_THREADS": "1"}])
def test_numpy_stays_in_the_template_and_each_call_has_blas_threads_as_a_fresh_interpreter(caller, monkeypatch):
    """OpenBLAS (numpy's BLAS) starts threads when it loads: the template loads it with one thread,
    so stays safe to fork with numpy imported, and each call gets the caller's setting back: the
    variable, and OpenBLAS's thread count as a fresh interpreter under the same variables has it."""
    for name in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in caller.items():
        monkeypatch.setenv(name, value)
    pool = WorkerPool()
    try:
        first = pool.submit(fray_jobs.blas_state, preload=("numpy",)).result(timeout=60)
        second = pool.submit(fray_jobs.blas_state, env={"OPENBLAS_NUM_THREADS": "1"}).result(timeout=60)
        template = pool._template.process.pid
        assert pool.templates_started == 1
    finally:
        pool.shutdown()
    fresh = _blas_in_a_fresh_interpreter(dict(os.environ))
    assert first["had_numpy"] and first["parent"] == template  # forked from a template holding numpy
    assert (first["variable"], first["openblas_threads"]) == (caller.get("OPENBLAS_NUM_THREADS"), fresh["openblas_threads"])
    # The call's own variables count as they would in a fresh interpreter started with them.
    assert second["had_numpy"] and (second["variable"], second["openblas_threads"]) == ("1", [1])


def test_cancel_ends_the_call(pool):
    handle = pool.submit(fray_jobs.sleep_then_return, 60, "late")
    pid = handle.pid
    handle.cancel(grace_s=0.5)
    with pytest.raises(JobCancelled):
        handle.result(timeout=10)
    assert not running(pid)


def test_a_call_killed_outright_takes_what_it_started_with_it(pool, tmp_path):
    # SIGKILL of the call's process alone (the OOM killer; a soak's kill of one step process):
    # nothing in it can act, yet a subprocess it started must not live on.
    handle, grandchild = fray_jobs.submit_with_grandchild(pool, str(tmp_path / "grandchild.pid"))
    os.kill(handle.pid, signal.SIGKILL)
    with pytest.raises(JobFailed):
        handle.result(timeout=30)
    gone, alive = psutil.wait_procs([grandchild], timeout=15)
    assert not alive, f"grandchild {grandchild.pid} outlived its killed call"


def test_bad_config_is_refused_by_name():
    with pytest.raises(ValueError, match="max_calls must be an int >= 1, got 0"):
        PoolConfig(max_calls=0)
    with pytest.raises(ValueError, match="never_in_template must be a tuple of module names, got 'jax'"):
        PoolConfig(never_in_template="jax")


def test_killing_the_caller_ends_the_template_and_its_calls(tmp_path):
    """SIGKILL of the process that owns the pool leaves no template and no call running."""
    pid_file = tmp_path / "pids"
    script = textwrap.dedent(f"""
        import os, time
        from testsupport import fray_jobs
        from fray.pool import WorkerPool
        pool = WorkerPool()
        handle = pool.submit(fray_jobs.sleep_then_return, 120, "never")
        template = pool._template.process.pid
        with open({str(pid_file)!r}, "w") as f:
            f.write(f"{{template}} {{handle.pid}}")
        time.sleep(120)
    """)
    caller = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text().strip()):
        assert time.monotonic() < deadline and caller.poll() is None
        time.sleep(0.05)
    template_pid, call_pid = map(int, pid_file.read_text().split())
    assert psutil.pid_exists(call_pid)
    caller.kill()
    caller.wait()
    deadline = time.monotonic() + 10
    survivors = [template_pid, call_pid]
    while survivors and time.monotonic() < deadline:
        survivors = [p for p in survivors if running(p)]
        time.sleep(0.05)
    assert survivors == []



def test_a_pool_dropped_without_shutdown_finishes_its_call_then_ends_its_template():
    """A caller that forgets shutdown() (a runner never closed) leaves no idle template running until
    it exits; a call already running when the pool is dropped still reports its result.

    No ``gc.collect()``: the dropped pool is freed by reference counting once its call has ended,
    as in a caller that never collects (a full collection of a test worker's heap costs a second)."""
    pool = WorkerPool()
    handle = pool.submit(fray_jobs.sleep_then_return, 1.0, "still here")
    assert pool._template is not None
    template = pool._template.process.pid
    del pool
    assert handle.result(timeout=60) == "still here"
    deadline = time.monotonic() + 10
    while running(template) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(template), "the dropped pool's template is still running"

def test_a_module_that_starts_a_thread_on_import_is_never_imported_into_a_template(pool, tmp_path, monkeypatch):
    (tmp_path / "fray_threaded_module.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the template takes the caller's sys.path
    name = "fray_threaded_module"
    first = pool.submit(fray_jobs.loaded, name, preload=(name,)).result(timeout=60)
    # Forking a threaded template is unsafe: the call was handed to a fresh template that did not
    # import the module, and ran there.
    assert first[0] is False
    assert pool.templates_started == 2
    again = pool.submit(fray_jobs.loaded, name, preload=(name,)).result(timeout=60)
    assert again == (False, first[1]) and pool.templates_started == 2


def _module_that_logs_its_importers(folder, name: str, body: str = "") -> str:
    """Write module ``name`` into ``folder``: importing it appends the importing pid to a file."""
    folder.mkdir(exist_ok=True)
    log = folder / f"{name}.importers"
    (folder / f"{name}.py").write_text(f"import os\nopen({str(log)!r}, 'a').write(f'{{os.getpid()}}\\n')\n{body}")
    return str(log)


def _importers(log: str) -> set[int]:
    with open(log) as f:
        return {int(line) for line in f.read().split()}


def test_what_a_call_imported_is_imported_into_the_template_for_later_calls(pool, tmp_path, monkeypatch):
    name = "fray_learned_module"
    log = _module_that_logs_its_importers(tmp_path, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert pool.submit(fray_jobs.import_module, name).result(timeout=60)[0] is False
    assert pool.settle(timeout=60)
    template = pool._template.process.pid
    # The next call starts with the module imported: in the template it was forked from.
    assert pool.submit(fray_jobs.import_module, name).result(timeout=60) == (True, template)
    assert template in _importers(log)
    later = pool.submit(fray_jobs.import_module, name)
    later.result(timeout=60)
    assert later.pid not in _importers(log)  # found imported, not imported again
    assert pool.templates_started == 1


def test_a_learned_module_that_starts_a_thread_is_never_imported_into_the_template(pool, tmp_path, monkeypatch):
    threaded = "fray_learned_threaded"
    log = _module_that_logs_its_importers(
        tmp_path, threaded, "import threading, time\nthreading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n")
    # And one that starts no thread itself but imports it: not safe either.
    wrapper = "fray_learned_wrapper"
    (tmp_path / f"{wrapper}.py").write_text(f"import {threaded}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for _ in range(3):  # taught again and again: tried once
        assert pool.submit(fray_jobs.import_module, wrapper).result(timeout=60)[0] is False
        assert pool.settle(timeout=60)
    template = pool._template.process.pid
    assert pool.submit(fray_jobs.loaded, threaded).result(timeout=60) == (False, template)
    assert pool.submit(fray_jobs.loaded, wrapper).result(timeout=60) == (False, template)
    assert template not in _importers(log)
    # The three calls, and one throwaway probe of the template (not one per call).
    assert len(_importers(log)) == 4
    assert {threaded, wrapper} <= pool._refused
    assert pool.templates_started == 1  # the template was never put at risk


def test_jax_is_never_imported_into_the_template(pool):
    assert pool.submit(fray_jobs.import_module, "jax").result(timeout=120)[0] is False
    assert pool.settle(timeout=120)
    template = pool._template.process.pid
    assert pool.submit(fray_jobs.loaded, "jax").result(timeout=60) == (False, template)
    assert pool.submit(fray_jobs.loaded, "jaxlib").result(timeout=60) == (False, template)
    assert pool.templates_started == 1


def test_a_learned_module_found_elsewhere_or_not_at_all_by_the_template_is_left_out(pool, tmp_path, monkeypatch):
    """A call that imported a module from a folder it put on ``sys.path`` taught a name that the
    template finds elsewhere (another module) or nowhere: neither is imported into the template."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    shadow_log = _module_that_logs_its_importers(ours, "fray_shadowed")
    _module_that_logs_its_importers(theirs, "fray_shadowed")
    _module_that_logs_its_importers(theirs, "fray_only_theirs")
    monkeypatch.syspath_prepend(str(ours))  # the template takes the caller's sys.path
    for name in ("fray_shadowed", "fray_only_theirs"):
        assert pool.submit(fray_jobs.import_module, name, str(theirs)).result(timeout=60)[0] is False
        assert pool.settle(timeout=60)
        assert pool.submit(fray_jobs.loaded, name).result(timeout=60)[0] is False
    assert not os.path.exists(shadow_log)  # the template's module of that name was never imported
    assert {"fray_shadowed", "fray_only_theirs"} <= pool._refused


def test_a_caller_whose_main_script_starts_a_thread_gets_calls_that_import_it_themselves(tmp_path):
    """A script that starts a thread at the top cannot be imported into a template: the first
    template says so and exits; the next leaves the script to each call."""
    script = tmp_path / "threaded_main.py"
    script.write_text(textwrap.dedent("""
        import json, threading, time
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
        from testsupport import fray_jobs
        from fray.pool import WorkerPool

        if __name__ == "__main__":
            pool = WorkerPool()
            try:
                first = [pool.submit(fray_jobs.square, i).result(timeout=60) for i in range(3)]
                print(json.dumps([first, pool.submit(fray_jobs.main_file).result(timeout=60), pool.templates_started]))
            finally:
                pool.shutdown()
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    squares, main_file, templates = json.loads(done.stdout.strip().splitlines()[-1])
    assert squares == [0, 1, 4]
    assert main_file == str(script)  # each call imported the caller's script itself
    assert templates == 2  # one refused the script; the next took every call


def test_a_package_that_starts_a_thread_is_probed_once_not_once_per_submodule(pool, tmp_path, monkeypatch):
    """The modules a call imported come in the order their imports ended: a package's submodules
    before the package. Importing a submodule runs its package first, so a package that starts a
    thread (through a module it imports, as numpy does) is tried before its submodules: one probe
    runs the package, not one per submodule."""
    threaded = "fray_threaded_dependency"
    thread_log = _module_that_logs_its_importers(
        tmp_path, threaded, "import threading, time\nthreading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n")
    package = "fray_package_with_a_thread"
    # Its submodules' imports end before its thread's module's does (as numpy's do).
    package_log = _module_that_logs_its_importers(tmp_path / package, "__init__",
                                                  f"from . import a, b, c, d, e, f\nimport {threaded}\n")
    for sub in "abcdef":
        (tmp_path / package / f"{sub}.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert pool.submit(fray_jobs.import_modules, [f"{package}.{sub}" for sub in "abcdef"]).result(timeout=60) is None
    assert pool.settle(timeout=60)
    assert len(_importers(package_log)) == 2  # the call and one probe
    assert len(_importers(thread_log)) == 3  # and the probe that tried it alone
    assert {package, threaded} <= pool._refused
    assert pool.submit(fray_jobs.loaded, threaded).result(timeout=60)[0] is False
    assert pool.templates_started == 1
