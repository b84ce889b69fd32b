"""Warm workers that keep what steps import: a fresh ``marin run`` of a chain of trivial steps whose
functions import a library inside (fsspec, as step functions do so that planning stays light; numpy,
whose BLAS starts threads when it loads),
beside the same chain whose steps import nothing, and beside GNU make and Snakemake building both
chains with a Python process per target (that process imports fsspec too, or nothing).

Each side runs ``REPEATS`` times, interleaved, into a fresh folder; the median is reported.
Snakemake comes from the ``bench`` extra (``make bench-peers`` runs this beside ``bench_scale``);
where it is not installed its rows say so. Size: ``BENCH_WARM_STEPS`` (default 100).

Goal: a chain whose steps import a library within 2x of the chain whose steps import nothing.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.bench_scale import (
    _TRIVIAL,
    _experiment_file,
    _make_build,
    _root,
    _snakemake_build,
    _timed,
    _tool,
)

REPEATS = 3
# What the importing steps import inside their functions (benchmarks.chain_steps), and what the
# peers' per-target process does with it (no single quotes: it goes inside '...' on a shell line).
_LIBRARIES = {"fsspec": ("chain_importing", 'fsspec.filesystem("file")'),
              "numpy": ("chain_importing_numpy", "numpy.asarray(1).sum()")}
_KINDS = {"nothing": ("chain", _TRIVIAL),
          **{library: (steps, f"import sys, {library}; {use}; open(sys.argv[1], \"w\").write(sys.argv[1])")
             for library, (steps, use) in _LIBRARIES.items()}}


def _interpreter_ms(code: str, times: int = 10) -> float:
    """Median wall time of ``python -c code`` (a fresh interpreter), in milliseconds."""
    samples = []
    for _ in range(times):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def run(work: str, n: int) -> dict[str, dict[str, float | None]]:
    """Seconds per build, median over the repeats: {tool: {what the steps import: seconds or None}}."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_root(), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a user's shell runs it
    marin = os.path.join(os.path.dirname(sys.executable), "marin")
    snakemake = _tool("snakemake")
    samples: dict[str, dict[str, list[float]]] = {tool: {kind: [] for kind in _KINDS}
                                                 for tool in ("marin", "make", "snakemake")}
    for r in range(REPEATS):
        for kind, (steps, script) in _KINDS.items():
            path = _experiment_file(work, steps, n)
            prefix = os.path.join(work, f"marin-{kind}-{r}")
            samples["marin"][kind].append(_timed([marin, "run", path, "--prefix", prefix, "-j", "1", "--warm-workers"],
                                                 env, _root()))
            samples["make"][kind].append(_make_build(os.path.join(work, f"make-{kind}-{r}"), "chain", n, 1, script))
            if snakemake is not None:
                samples["snakemake"][kind].append(_snakemake_build(snakemake, os.path.join(work, f"snakemake-{kind}"),
                                                                   "chain", n, 1, timeout=900, script=script))
    return {tool: {kind: statistics.median(s) if s else None for kind, s in by_kind.items()}
            for tool, by_kind in samples.items()}


def main() -> None:
    """Print the side-by-side report."""
    n = int(os.environ.get("BENCH_WARM_STEPS", "100"))
    work = tempfile.mkdtemp(prefix="marin-bench-warm-")
    try:
        bare = _interpreter_ms("pass")
        bare_importing = {library: _interpreter_ms(f"import {library}") for library in _LIBRARIES}
        results = run(work, n)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n== warm workers keep what steps import: fresh {n}-step chains, -j 1, median of {REPEATS} ==")
    imports = "; ".join(f"importing {library} in it: {ms:.1f} ms" for library, ms in bare_importing.items())
    print(f"bare interpreter: {bare:.1f} ms; {imports}")
    labels = {"marin": "marin run (warm workers)", "make": "GNU make (python per target)",
              "snakemake": "Snakemake --cores 1 (python per job)"}
    print(f"{'ms per step, steps import:':<38}" + "".join(f"{kind:>12}" for kind in _KINDS)
          + "".join(f"{library + ' ratio':>15}" for library in _LIBRARIES))
    for tool, by_kind in results.items():
        plain = by_kind["nothing"]
        if plain is None or any(by_kind[library] is None for library in _LIBRARIES):
            print(f"{labels[tool]:<38} not installed (the bench extra: make bench-peers)")
            continue
        print(f"{labels[tool]:<38}" + "".join(f"{by_kind[kind] / n * 1e3:12.1f}" for kind in _KINDS)
              + "".join(f"{by_kind[library] / plain:14.2f}x" for library in _LIBRARIES))
    marin = results["marin"]
    assert all(value is not None for value in marin.values())
    for library in _LIBRARIES:
        print(f"goal: steps importing {library} within 2x of steps importing nothing: "
              f"{marin[library] / marin['nothing']:.2f}x")


if __name__ == "__main__":
    main()
