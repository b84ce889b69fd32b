"""No-op `marin run` / `marin plan` on cached chains, beside `make -q` and a bare interpreter.

Every number comes from this one run; each command is started fresh several times and the
median is reported. The chains were really built (records as a user's store has them). Goals (issue 2): in-process at most 50 µs per cached step; as a fresh
command, a 1,000-step no-op at most 100 ms over the bare interpreter; 10,000 steps at most 12x
the cost of 1,000. The no-op stays the fastest path: a 1,000-step no-op ``marin run`` costs at most
5x a bare interpreter start (GNU make's no-op on a 1,000-target chain shown beside it, in the same units).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

REPEATS = 5


def _build(prefix: str, n: int) -> None:
    """Build a chain of ``n`` for real (in-process, then copied to ``prefix``): its records are the
    success, status, provenance, manifest and log files a user's store has, and its done index."""
    from benchmarks.bench_scale import built_store
    from benchmarks.chain_steps import chain

    built_store(chain(n), prefix, prefix)


def _experiment_file(folder: str, n: int) -> str:
    path = os.path.join(folder, f"chain_{n}.py")
    with open(path, "w") as f:
        f.write(textwrap.dedent(f"""
            from benchmarks.chain_steps import chain
            steps = chain({n})
        """))
    return path


def _median_seconds(cmd: list[str], cwd: str, env: dict[str, str]) -> float:
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)  # warm-up
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _make_chain(folder: str, n: int) -> str:
    mk = os.path.join(folder, "Makefile")
    with open(mk, "w") as f:
        f.write(f"all: t{n - 1}\n")
        f.write("t0:\n\ttouch $@\n")
        for i in range(1, n):
            f.write(f"t{i}: t{i - 1}\n\ttouch $@\n")
    subprocess.run(["make", "-s", "-C", folder, "-j1"], check=True, stdout=subprocess.DEVNULL)
    return folder


def _in_process(prefix: str, n: int) -> float:
    from benchmarks.chain_steps import chain
    from marin.execution.run.runner import StepRunner

    best = []
    for _ in range(REPEATS):
        steps = chain(n)  # fresh objects: hashes are not memoised across repetitions
        runner = StepRunner(prefix=prefix, max_parallel=1, strict_env=False, config=None)
        start = time.perf_counter()
        result = runner.run(steps)
        best.append(time.perf_counter() - start)
        assert result.count(result.steps[0].outcome) == n
    return statistics.median(best)


def main() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    marin = os.path.join(os.path.dirname(sys.executable), "marin")
    # Measure what a user's shell sees: bytecode caching on (some sandboxes turn it off), warmed once.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = root
    work = tempfile.mkdtemp(prefix="marin-bench-engine-")
    try:
        bare = _median_seconds([sys.executable, "-c", "pass"], root, env)
        rows = [("python -c pass (bare interpreter)", bare, None)]
        make_dir = os.path.join(work, "make")
        os.makedirs(make_dir)
        _make_chain(make_dir, 1000)
        make_q = _median_seconds(["make", "-q", "-C", make_dir], root, env)
        rows.append(("make -q, 1,000-target chain", make_q, None))
        per_step = {}
        fresh = {}
        for n in (1000, 10000):
            prefix = os.path.join(work, f"store{n}")
            _build(prefix, n)
            path = _experiment_file(work, n)
            t_in = _in_process(prefix, n)
            per_step[n] = t_in / n
            rows.append((f"engine in-process, {n:,} cached steps", t_in, f"{t_in / n * 1e6:.1f} µs/step"))
            for verb in ("run", "plan"):
                t = _median_seconds([marin, verb, path, "--prefix", prefix], root, env)
                fresh[(verb, n)] = t
                rows.append((f"marin {verb}, {n:,} cached steps (fresh command)", t, f"+{(t - bare) * 1e3:.0f} ms over bare"))
        print(f"\n== engine: no-op on cached chains (median of {REPEATS}) ==")
        width = max(len(r[0]) for r in rows)
        for label, seconds, note in rows:
            print(f"{label:<{width}}  {seconds * 1e3:9.1f} ms  {note or ''}")
        print()
        print(f"goal in-process <= 50 µs/step: 1k {per_step[1000] * 1e6:.1f} µs, 10k {per_step[10000] * 1e6:.1f} µs")
        over = fresh[("run", 1000)] - bare
        print(f"goal fresh 1k no-op <= bare + 100 ms: +{over * 1e3:.0f} ms")
        for verb in ("run", "plan"):
            ratio = fresh[(verb, 10000)] / fresh[(verb, 1000)]
            print(f"goal {verb} 10k / 1k <= 12x: {ratio:.1f}x")
        print(f"marin run 1k vs make -q 1k: {fresh[('run', 1000)] / make_q:.1f}x")
        print(f"goal marin run 1k no-op <= 5x bare interpreter: {fresh[('run', 1000)] / bare:.1f}x "
              f"(GNU make -q, 1,000-target chain: {make_q / bare:.1f}x)")
        # The planning path must not pull in JAX.
        probe = subprocess.run(
            [sys.executable, "-c", "import sys; from marin.cli.main import cli; from marin.cli import cmd_plan, cmd_run;"
             " from marin.execution import step_runner; print('jax' in sys.modules)"],
            cwd=root, env=env, capture_output=True, text=True, check=True)
        print(f"planning path imports jax: {probe.stdout.strip()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
