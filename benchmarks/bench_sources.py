"""Fingerprinting sources from outside the store: a glob of 10,000 small local files, with the stat
cache warm (nothing changed: a ``stat`` per file) beside a bare ``glob`` + ``os.stat`` of the same
files, and after every file was rewritten (each read once) beside ``sha256sum`` of them; and the
requests that fingerprinting a 10,000-object ``gs://`` prefix costs on fake-gcs-server (behind
:class:`testsupport.latency.LatencyProxy`, which counts requests and can add a cloud round trip).

Goals: a warm fingerprint within 3x of the bare glob + stat; the first fingerprint after a rewrite
within 1.5x of ``sha256sum``; a prefix listed in one paginated listing (gcsfs asks for 1,000
objects a page), whatever the number of sources under it.

Sizes: ``BENCH_SOURCES_FILES`` (default 10000), ``BENCH_SOURCES_OBJECTS`` (default 10000; uploaded
by 32 threads). Only part of it: ``python -m benchmarks.bench_sources local`` (or ``gcs``).
"""

from __future__ import annotations

import glob
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

REPEATS = 5
DELAY_S = 0.030
_WORDS = "the cat dog sun tree girl boy ran saw big small happy sad red blue ball park home".split()


def _write_files(folder: str, n: int, generation: int) -> list[str]:
    """``n`` files of 2-4 KB of text, dated an hour back (the stat cache trusts only files that
    were not modified in the seconds before it read them; data is rarely that fresh)."""
    paths = []
    old = time.time_ns() - 3600 * 10**9 + generation * 10**9
    for i in range(n):
        sub = os.path.join(folder, f"shard-{i // 1000:02d}")
        os.makedirs(sub, exist_ok=True)
        path = os.path.join(sub, f"part-{i:05d}.txt")
        line = " ".join(_WORDS[(i + j + generation) % len(_WORDS)] for j in range(12)) + "\n"
        with open(path, "w") as f:
            f.write(f"{generation} {i}\n" + line * (30 + i % 40))
        os.utime(path, ns=(old, old))
        paths.append(path)
    return paths


def _median_ms(fn, repeats: int = REPEATS) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def _bare_glob_stat(pattern: str) -> None:
    for path in glob.glob(pattern, recursive=True):
        os.stat(path)


def _sha256sum(list_file: str) -> None:
    subprocess.run(["xargs", "-0", "-a", list_file, "sha256sum"], check=True, stdout=subprocess.DEVNULL)


def run_local(n: int) -> None:
    """Print the warm (stat) path and the reading path beside their floors."""
    from marin.execution.store.sources import StatCache, fingerprint_source

    work = tempfile.mkdtemp(prefix="marin-bench-sources-")
    try:
        folder = os.path.join(work, "data")
        paths = _write_files(folder, n, 0)
        pattern = os.path.join(folder, "*", "*.txt")
        list_file = os.path.join(work, "files.list")
        with open(list_file, "wb") as f:
            f.write(b"\0".join(p.encode() for p in paths))
        with StatCache(os.path.join(work, "stat-cache.sqlite")) as cache:
            start = time.perf_counter()
            first = fingerprint_source(pattern, stat_cache=cache)
            cold = time.perf_counter() - start
            assert len(first.files) == n and cache.reads == n
            warm = _median_ms(lambda: fingerprint_source(pattern, stat_cache=cache))
            bare = _median_ms(lambda: _bare_glob_stat(pattern))
            assert cache.reads == n, "a warm fingerprint read a file"
            reading, floor = [], []
            for generation in range(1, 4):
                _write_files(folder, n, generation)
                reads = cache.reads
                start = time.perf_counter()
                fingerprint_source(pattern, stat_cache=cache)
                reading.append(time.perf_counter() - start)
                assert cache.reads == reads + n
                floor.append(_median_ms(lambda: _sha256sum(list_file), repeats=1) / 1e3)
        print(f"\n== local sources: a glob of {n:,} files of 2-4 KB ({sum(map(os.path.getsize, paths)) / 2**20:.0f} MiB) ==")
        print(f"{'':<44}{'marin':>12}{'floor':>12}{'ratio':>8}")
        print(f"{'warm stat cache vs glob + os.stat':<44}{warm:>9.1f} ms{bare:>9.1f} ms{warm / bare:>7.2f}x")
        print(f"{'every file rewritten vs sha256sum (xargs)':<44}{statistics.median(reading) * 1e3:>9.1f} ms"
              f"{statistics.median(floor) * 1e3:>9.1f} ms{statistics.median(reading) / statistics.median(floor):>7.2f}x")
        print(f"(the first fingerprint into an empty stat cache: {cold * 1e3:.1f} ms)")
        print(f"goal: warm within 3x of glob + stat: {warm / bare:.2f}x; reading within 1.5x of sha256sum: "
              f"{statistics.median(reading) / statistics.median(floor):.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_gcs(n: int) -> None:
    """Print the requests (and time, with and without a 30 ms round trip) a large prefix costs."""
    from marin.execution.store.sources import fingerprint_source, fingerprint_sources
    from rigging import filesystem as fs
    from testsupport.gcs import start_fake_gcs_server, use_gcs_emulator
    from testsupport.latency import LatencyProxy

    emulator = start_fake_gcs_server()
    try:
        with LatencyProxy(emulator.url) as proxy, use_gcs_emulator(proxy.url):
            bucket = emulator.create_bucket()
            start = time.perf_counter()
            with ThreadPoolExecutor(32) as pool:
                list(pool.map(lambda i: fs.atomic_write(f"{bucket}/data/part-{i:05d}.jsonl", b"%d\n" % i), range(n)))
            uploaded = time.perf_counter() - start
            rows = []
            for delay in (0.0, DELAY_S):
                proxy.delay_s = delay
                proxy.reset()
                start = time.perf_counter()
                found = fingerprint_source(f"{bucket}/data")
                took = time.perf_counter() - start
                assert len(found.files) == n
                rows.append((f"gs://…/data ({delay * 1e3:.0f} ms round trip)", len(proxy.reset()), took))
            specs = [f"{bucket}/data", f"{bucket}/data/*.jsonl", f"{bucket}/data/part-0*", f"{bucket}/data/part-00001.jsonl"]
            start = time.perf_counter()
            fingerprint_sources([(spec, None) for spec in specs])
            rows.append((f"{len(specs)} sources under it (30 ms)", len(proxy.reset()), time.perf_counter() - start))
    finally:
        emulator.stop()
    print(f"\n== object-store sources: a prefix of {n:,} objects on fake-gcs-server (uploaded in {uploaded:.1f} s) ==")
    print(f"{'':<44}{'requests':>10}{'seconds':>10}")
    for label, requests, seconds in rows:
        print(f"{label:<44}{requests:>10}{seconds:>10.2f}")
    print(f"goal: one listing of {math.ceil(n / 1000)} pages of 1,000 objects, shared by every source under the "
          f"prefix: {rows[0][1]} and {rows[-1][1]} requests")


def main(parts: list[str] | None = None) -> None:
    """``python -m benchmarks.bench_sources [local] [gcs]`` (both by default)."""
    parts = parts or ["local", "gcs"]
    if "local" in parts:
        run_local(int(os.environ.get("BENCH_SOURCES_FILES", "10000")))
    if "gcs" in parts:
        run_gcs(int(os.environ.get("BENCH_SOURCES_OBJECTS", "10000")))


if __name__ == "__main__":
    main(sys.argv[1:])
