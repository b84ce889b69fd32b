"""No-op `marin run` / `marin plan` on cached chains, beside `make -q` and a bare interpreter.

Every number comes from this one run; each command is started fresh several times and the
median is reported. The chains were really built (records as a user's store has them). Goals (issue 2): in-process at most 50 µs per cached step; as a fresh
command, a 1,000-step no-op at most 100 ms over the bare interpreter; 10,000 steps at most 12x
the cost of 1,000. The no-op stays the fastest path: a 1,000-step no-op ``marin run`` costs at most
5x a bare interpreter start (GNU make's no-op on a 1,000-target chain shown beside it, in the same units).

``marin run`` is measured twice: answered from its no-op record (``marin.cli.noop``: ``stat`` calls,
the experiment not imported), and in full (``MARIN_NO_FAST_NOOP=1``: the experiment imported, the
graph hashed and planned). The records live beside this benchmark's own stat cache, not the user's.
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


def _experiment_file(work: str, n: int) -> str:
    """The chain's experiment file, in a folder of its own dated back: a no-op record trusts no file
    (nor a folder it lists) modified moments before it was read, as the stat cache does not."""
    folder = os.path.join(work, f"exp{n}")
    os.makedirs(folder)
    path = os.path.join(folder, f"chain_{n}.py")
    with open(path, "w") as f:
        f.write(textwrap.dedent(f"""
            from benchmarks.chain_steps import chain
            steps = chain({n})
        """))
    settled = time.time() - 10
    for p in (path, folder):
        os.utime(p, (settled, settled))
    return path


def _median_seconds(cmd: list[str], cwd: str, env: dict[str, str]) -> float:
    # Both streams are pipes, as for _answered: whether they are terminals is part of a record's key.
    subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True)  # warm-up
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True)
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


def _answered(marin: str, path: str, prefix: str, root: str, env: dict[str, str]) -> str:
    """Run ``marin run`` until its no-op record answers it (what ``-v`` says; a few tries, a few
    seconds apart: the first import writes the experiment's ``__pycache__``, a change in a folder it
    listed, and a record trusts no folder changed moments before); the last debug line."""
    said = ""
    for _ in range(4):
        subprocess.run([marin, "run", path, "--prefix", prefix], cwd=root, env=env, check=True, capture_output=True)
        ran = subprocess.run([marin, "-v", "run", path, "--prefix", prefix], cwd=root, env=env, check=True,
                             capture_output=True, text=True)
        said = next((line for line in ran.stderr.splitlines() if "marin.cli.noop:" in line), "no debug line")
        if "answered from the no-op record" in said:
            break
        time.sleep(2.5)
    return said


def _commands(marin: str, work: str, root: str, env: dict[str, str], bare: float,
              rows: list[tuple[str, float, str | None]]) -> tuple[dict[int, float], dict[tuple[str, int], float]]:
    """Per-step in-process times, and the fresh commands' medians by (what, steps)."""
    per_step, fresh = {}, {}
    full_env = {**env, "MARIN_NO_FAST_NOOP": "1"}
    for n in (1000, 10000):
        prefix = os.path.join(work, f"store{n}")
        _build(prefix, n)
        path = _experiment_file(work, n)
        t_in = _in_process(prefix, n)
        per_step[n] = t_in / n
        rows.append((f"engine in-process, {n:,} cached steps", t_in, f"{t_in / n * 1e6:.1f} µs/step"))
        said = _answered(marin, path, prefix, root, env)
        for what, verb, run_env in (("run", "run", env), ("run full", "run", full_env), ("plan", "plan", env)):
            t = _median_seconds([marin, verb, path, "--prefix", prefix], root, run_env)
            fresh[(what, n)] = t
            label = {"run": "marin run (no-op record)", "run full": "marin run (in full)", "plan": "marin plan"}[what]
            rows.append((f"{label}, {n:,} cached steps (fresh command)", t,
                         f"+{(t - bare) * 1e3:.0f} ms over bare, {t / bare:.1f}x"))
        if "answered from the no-op record" not in said:
            rows.append((f"  (the no-op record did NOT answer the {n:,}-step run: {said})", fresh[("run", n)], None))
    return per_step, fresh


def main() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    marin = os.path.join(os.path.dirname(sys.executable), "marin")
    work = tempfile.mkdtemp(prefix="marin-bench-engine-")
    # Measure what a user's shell sees: bytecode caching on (some sandboxes turn it off), warmed once.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = root
    env["MARIN_STAT_CACHE"] = os.path.join(work, "cache", "stat-cache.sqlite")  # no-op records beside it
    os.makedirs(os.path.dirname(env["MARIN_STAT_CACHE"]))
    try:
        bare = _median_seconds([sys.executable, "-c", "pass"], root, env)
        rows: list[tuple[str, float, str | None]] = [("python -c pass (bare interpreter)", bare, None)]
        make_dir = os.path.join(work, "make")
        os.makedirs(make_dir)
        _make_chain(make_dir, 1000)
        make_q = _median_seconds(["make", "-q", "-C", make_dir], root, env)
        rows.append(("make -q, 1,000-target chain", make_q, f"{make_q / bare:.1f}x bare"))
        per_step, fresh = _commands(marin, work, root, env, bare, rows)
        print(f"\n== engine: no-op on cached chains (median of {REPEATS}) ==")
        width = max(len(r[0]) for r in rows)
        for label, seconds, note in rows:
            print(f"{label:<{width}}  {seconds * 1e3:9.1f} ms  {note or ''}")
        print()
        print(f"goal in-process <= 50 µs/step: 1k {per_step[1000] * 1e6:.1f} µs, 10k {per_step[10000] * 1e6:.1f} µs")
        over = fresh[("run full", 1000)] - bare
        print(f"goal fresh 1k no-op in full <= bare + 100 ms: +{over * 1e3:.0f} ms")
        for what in ("run", "run full", "plan"):
            ratio = fresh[(what, 10000)] / fresh[(what, 1000)]
            print(f"goal marin {what} 10k / 1k <= 12x: {ratio:.1f}x")
        print(f"goal marin run 1k no-op <= 5x bare interpreter: {fresh[('run', 1000)] / bare:.1f}x answered from its "
              f"no-op record, {fresh[('run full', 1000)] / bare:.1f}x in full "
              f"(GNU make -q, 1,000-target chain: {make_q / bare:.1f}x)")
        print(f"marin run 1k vs make -q 1k: {fresh[('run', 1000)] / make_q:.1f}x with the record, "
              f"{fresh[('run full', 1000)] / make_q:.1f}x in full")
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
