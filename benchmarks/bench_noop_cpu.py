"""The no-op record's two costs, in CPU seconds of the command (its user and system time, which
other load on the machine barely moves, unlike wall time): a 1,000-step no-op ``marin run``
answered from its record, and the run that writes the record (the full run after a change, which
watches the experiment's code while it is imported and its plan made; see docs/caching.md, "The
no-op record"). A bare interpreter start beside them. Medians of ``BENCH_NOOP_REPEATS`` (5);
``BENCH_NOOP_STEPS`` steps (1,000).

The record is made stale before each recording run by dating the experiment file back one second
more (its ``stat`` differs; its content and the plan do not).
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.bench_engine import _build, _experiment_file


def _cpu_seconds(cmd: list[str], cwd: str, env: dict[str, str]) -> tuple[float, str]:
    """The command's CPU seconds (user and system, of it and its children), and its stderr."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc.stderr


def main() -> None:
    n = int(os.environ.get("BENCH_NOOP_STEPS", "1000"))
    repeats = int(os.environ.get("BENCH_NOOP_REPEATS", "5"))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    marin = os.path.join(os.path.dirname(sys.executable), "marin")
    work = tempfile.mkdtemp(prefix="marin-bench-noop-cpu-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARIN_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = root
    env["MARIN_STAT_CACHE"] = os.path.join(work, "cache", "stat-cache.sqlite")  # the records beside it
    os.makedirs(os.path.dirname(env["MARIN_STAT_CACHE"]))
    try:
        prefix = os.path.join(work, "store")
        _build(prefix, n)
        path = _experiment_file(work, n)
        run = [marin, "run", path, "--prefix", prefix]
        answered, recording, missed = [], [], 0
        for i in range(repeats):
            when = time.time() - 20 - i  # another mtime: the record no longer holds, the plan is the same
            os.utime(path, (when, when))
            recording.append(_cpu_seconds(run, root, env)[0])
            said = _cpu_seconds([marin, "-v", *run[1:]], root, env)[1]
            if "answered from the no-op record" not in said:
                missed += 1  # a file it read was modified moments before: no record this time
                continue
            answered.append(_cpu_seconds(run, root, env)[0])
        bare = statistics.median(_cpu_seconds([sys.executable, "-c", "pass"], root, env)[0] for _ in range(repeats))
        print(f"\n== no-op record: CPU seconds of a {n:,}-step no-op marin run (median of {repeats}) ==")
        print(f"answered from its record  {statistics.median(answered) * 1e3:6.0f} ms" if answered
              else "answered from its record  (never answered)")
        print(f"the run that records it   {statistics.median(recording) * 1e3:6.0f} ms")
        print(f"bare interpreter          {bare * 1e3:6.0f} ms")
        if missed:
            print(f"({missed} of {repeats} recording runs left no record: a file read was modified moments before)")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
