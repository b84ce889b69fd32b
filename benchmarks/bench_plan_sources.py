"""What fingerprinting sources costs a plan: a no-op ``marin plan`` (a fresh command, as users run
it) of a step that reads a glob of 10,000 local files through ``source(...)``, beside the same plan
of the same step holding the glob as a plain string (no source: nothing is looked at), and the same
comparison in-process (``StepRunner.plan``), where the interpreter's start does not hide it.

Goal: the no-op plan with the source at most 1.5x the plan without. Size: ``BENCH_SOURCES_FILES``
(default 10000).
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

from benchmarks.bench_sources import _write_files

REPEATS = 5

_EXPERIMENT = """
from benchmarks.chain_steps import LinkConfig, link
from marin.execution.core.sources import source
from marin.execution.core.step import Step

steps = [Step("read/corpus", link, LinkConfig(index=0, previous={data}))]
"""


def _experiment(folder: str, name: str, data: str) -> str:
    path = os.path.join(folder, f"{name}.py")
    with open(path, "w") as f:
        f.write(textwrap.dedent(_EXPERIMENT.format(data=data)))
    return path


def _median_s(fn) -> float:
    fn()  # warm-up: the stat cache is filled, modules are cached
    samples = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    n = int(os.environ.get("BENCH_SOURCES_FILES", "10000"))
    root = tempfile.mkdtemp(prefix="bench-plan-sources-")
    try:
        data = os.path.join(root, "corpus")
        _write_files(data, n, generation=0)
        pattern = os.path.join(data, "**", "*.txt")
        env = {**os.environ, "MARIN_STAT_CACHE": os.path.join(root, "stat-cache.sqlite"),
               "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
        prefix = os.path.join(root, "store")
        files = {"with source(...)": _experiment(root, "with_source", f"source({pattern!r})"),
                 "plain string": _experiment(root, "plain", repr(pattern))}
        marin = [os.path.join(os.path.dirname(sys.executable), "marin")]
        for path in files.values():
            subprocess.run([*marin, "run", path, "--prefix", prefix], env=env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        fresh = {label: _median_s(lambda p=path: subprocess.run(
            [*marin, "plan", p, "--prefix", prefix], env=env, check=True, stdout=subprocess.DEVNULL))
            for label, path in files.items()}
        in_process = _in_process(files, prefix, env["MARIN_STAT_CACHE"])
        print(f"\n== plan: a step over a glob of {n:,} local files, built; no-op plan (median of {REPEATS}) ==")
        print(f"{'':44s}{'source(...)':>14s}{'plain string':>14s}{'ratio':>8s}")
        for label, (a, b) in (("marin plan (fresh command)", (fresh["with source(...)"], fresh["plain string"])),
                              ("StepRunner.plan (in process)", in_process)):
            print(f"{label:44s}{a * 1e3:11.1f} ms{b * 1e3:11.1f} ms{a / b:7.2f}x")
        ratio = fresh["with source(...)"] / fresh["plain string"]
        print(f"goal: a no-op marin plan with the source <= 1.5x the plan without: {ratio:.2f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _in_process(files: dict[str, str], prefix: str, stat_cache: str) -> tuple[float, float]:
    # Imported here: the experiment files import from benchmarks/, which main() put on the path.
    from marin.cli.targets import load_targets
    from marin.execution.run.runner import StepRunner

    os.environ["MARIN_STAT_CACHE"] = stat_cache
    out = []
    for path in files.values():
        steps = load_targets([path])
        runner = StepRunner(prefix=prefix, max_parallel=1, config=None)
        out.append(_median_s(lambda r=runner, s=steps: r.plan(s, note_env=True)))
    return out[0], out[1]


if __name__ == "__main__":
    main()
