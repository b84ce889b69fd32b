"""How long a step runs on after its lease is lost: taken over by another runner, on each kind of
local worker (forked from the warm template, and a fresh interpreter), with a 1 s lease (the
heartbeat renews every 0.25 s). Goal (issue 24): stopped within two heartbeat periods.

A third row freezes the runner (SIGSTOP) before the takeover: its heartbeat cannot act, and the
step's own watch of its lease (read every ttl/4) is what stops it.
"""

from __future__ import annotations

import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import psutil

TTL = 1.0
REPEATS = 5


def _stop_time(work: str, warm: bool, round_no: int) -> float:
    from benchmarks.chain_steps import TickConfig, tick_until_stopped
    from marin.execution.core.step import Step
    from marin.execution.run.runner import StepRunner
    from marin.execution.store.records import StepRecord
    from testsupport.leases import take_over

    pid_file = os.path.join(work, f"pid-{warm}-{round_no}")
    step = Step(f"lost/tick-{warm}-{round_no}", tick_until_stopped, TickConfig(pid_file=pid_file))
    runner = StepRunner(prefix=os.path.join(work, "store"), lease_ttl=TTL, poll_interval=0.02, warm_workers=warm)
    meta = StepRecord(os.path.join(runner.settings.prefix, step.output_name)).meta
    thread = threading.Thread(target=lambda: runner.run([step]), daemon=True)
    thread.start()
    try:
        while not os.path.exists(pid_file):
            time.sleep(0.01)
        process = psutil.Process(int(open(pid_file).read()))
        other = take_over(meta, holder="elsewhere:1:bench")
        taken = time.perf_counter()
        process.wait(timeout=60)
        stopped = time.perf_counter() - taken
        # The other holder gives the step up: this runner takes it again and finishes it at once.
        other.release()
        thread.join(timeout=120)
        return stopped
    finally:
        runner.close()


_FROZEN_RUNNER = textwrap.dedent("""
    import sys
    from benchmarks.chain_steps import TickConfig, tick_until_stopped
    from marin.execution.step import Step
    from marin.execution.step_runner import StepRunner

    if __name__ == "__main__":
        store, name, pid_file, ttl = sys.argv[1:5]
        step = Step(name, tick_until_stopped, TickConfig(pid_file=pid_file))
        raise SystemExit(0 if StepRunner(prefix=store, lease_ttl=float(ttl), poll_interval=0.02).run([step]).ok else 1)
""")


def _stop_time_frozen_runner(work: str, round_no: int) -> float:
    from benchmarks.chain_steps import TickConfig, tick_until_stopped
    from marin.execution.core.step import Step
    from marin.execution.store.records import StepRecord
    from testsupport.leases import take_over

    pid_file = os.path.join(work, f"pid-frozen-{round_no}")
    store = os.path.join(work, "store")
    step = Step(f"lost/frozen-{round_no}", tick_until_stopped, TickConfig(pid_file=pid_file))
    script = os.path.join(work, "frozen_runner.py")
    Path(script).write_text(_FROZEN_RUNNER)
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    # Its log lines (each round loses a lease on purpose) are not the report's.
    runner = subprocess.Popen([sys.executable, script, store, step.name, pid_file, str(TTL)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not os.path.exists(pid_file):
            assert runner.poll() is None, "the runner ended before its step started"
            time.sleep(0.01)
        process = psutil.Process(int(open(pid_file).read()))
        runner.send_signal(signal.SIGSTOP)
        other = take_over(StepRecord(os.path.join(store, step.output_name)).meta, holder="elsewhere:1:bench")
        taken = time.perf_counter()
        process.wait(timeout=60)
        stopped = time.perf_counter() - taken
        other.release()
        runner.send_signal(signal.SIGCONT)
        runner.wait(timeout=120)
        return stopped
    finally:
        runner.send_signal(signal.SIGCONT)
        if runner.poll() is None:
            runner.kill()
            runner.wait()


def main() -> None:
    logging.getLogger("marin").setLevel(logging.ERROR)  # each round loses a lease on purpose
    logging.getLogger("rigging").setLevel(logging.ERROR)
    print(f"\nA step's lease taken over: seconds until its process is gone (lease {TTL:g} s, heartbeat every "
          f"{TTL / 4:g} s, goal <= {2 * TTL / 4:g} s), median and max of {REPEATS}")
    print(f"{'worker':<22}{'median':>10}{'max':>10}")
    with tempfile.TemporaryDirectory(prefix="bench-lost-") as work:
        for warm in (True, False):
            times = [_stop_time(work, warm, i) for i in range(REPEATS)]
            label = "warm worker (fork)" if warm else "fresh interpreter"
            print(f"{label:<22}{statistics.median(times):>10.3f}{max(times):>10.3f}")
        times = [_stop_time_frozen_runner(work, i) for i in range(REPEATS)]
        print(f"{'runner frozen':<22}{statistics.median(times):>10.3f}{max(times):>10.3f}"
              "   (the step's own watch stops it)")


if __name__ == "__main__":
    main()
