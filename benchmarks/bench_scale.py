"""Scale: no-op commands on 1,000 cached steps on gs:// (requests and time with 30 ms round
trips), and fresh builds of trivial chains and fans locally beside GNU make.

The gs:// store is the GCS emulator behind :class:`rigging.testing.LatencyProxy`, which adds a
fixed delay to every request (a cloud VM's round trip) and counts requests. The cached graph is
really built (by the runner, into ``memory://``) and then copied, so its records are the ones a
user's store has.

Goals (issue 17): at most 0.02 requests per cached step for no-op run/plan/status; no-op
``marin run`` on 1,000 cached gs:// steps under 3 s with the 30 ms delay; building a trivial step
on gs:// at most about 15 requests beyond its own files; a fresh build of trivial steps at most
30 ms per step on 2 cores.

Sizes: ``BENCH_GCS_STEPS`` (default 1000), ``BENCH_GCS_BUILD_STEPS`` (default 10) and
``BENCH_BUILD_STEPS`` (default 1000).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

DELAY_S = 0.030
# What a trivial step's one file costs on gs://: its write, and its read for the manifest's digest
# (one ranged GET: the size comes from the output's listing).
OWN_FILE_REQUESTS = 2


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _experiment_file(folder: str, kind: str, n: int) -> str:
    path = os.path.join(folder, f"{kind}_{n}.py")
    with open(path, "w") as f:
        f.write(textwrap.dedent(f"""
            from benchmarks.chain_steps import {kind}
            steps = {kind}({n})
        """))
    return path


class _Silent:
    """A reporter that draws nothing (building the benchmark's store is not what is measured)."""

    def planned(self, plan) -> None: ...
    def started(self, planned) -> None: ...
    def waiting(self, planned, holder) -> None: ...
    def finished(self, outcome) -> None: ...
    def tick(self, running) -> None: ...


def _in_process_client():
    # Runs each step in the calling process (a newer home first, an older one for BEFORE numbers).
    try:
        from fray.cluster import InProcessClient  # type: ignore[attr-defined]
    except ImportError:
        from marin.execution.step_runner import _InProcessClient as InProcessClient
    return InProcessClient()


def built_store(steps: list, local_root: str, prefix_text: str) -> None:
    """Build ``steps`` for real into the local folder ``local_root``, in this process.

    Only the setup is sped up: steps run in-process and files are not fsynced while building;
    every record (success, status, provenance, manifest, log, done index) is the runner's own.
    Records that name ``local_root`` name ``prefix_text`` instead (where the store will live).
    """
    from unittest import mock

    from marin.execution.step_runner import StepRunner

    runner = StepRunner(prefix=local_root, max_parallel=1, strict_env=False, config=None, reporter=_Silent(),
                        client=_in_process_client())
    with mock.patch("os.fsync", lambda fd: None):
        result = runner.run(steps)
    if not result.ok:
        raise RuntimeError(f"building the benchmark graph failed: {result.failed[:1]}")
    if prefix_text != local_root:
        for folder, _dirs, files in os.walk(local_root):
            for name in files:
                if name.endswith(".json"):
                    path = os.path.join(folder, name)
                    with open(path, "rb") as f:
                        data = f.read()
                    with open(path, "wb") as f:
                        f.write(data.replace(local_root.encode(), prefix_text.encode()))


def _timed(cmd: list[str], env: dict[str, str], cwd: str, timeout: float = 900) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed: {done.stderr[-2000:]}")
    return elapsed


def _upload_tree(url: str, bucket: str, local_root: str, key_prefix: str) -> None:
    """Upload every file under ``local_root`` to ``<bucket>/<key_prefix>/`` (plain media uploads)."""
    import urllib.parse
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    files = [os.path.join(d, f) for d, _, names in os.walk(local_root) for f in names]
    # The emulator cannot take an empty media upload: those go through gcsfs (multipart).
    empty = [f for f in files if os.path.getsize(f) == 0]
    files = [f for f in files if f not in set(empty)]
    if empty:
        import gcsfs.core

        gcs = gcsfs.core.GCSFileSystem(token="anon", endpoint_url=url)
        for path in empty:
            gcs.pipe_file(f"{bucket}/{key_prefix}/{os.path.relpath(path, local_root)}", b"")

    def upload(path: str) -> None:
        key = f"{key_prefix}/{os.path.relpath(path, local_root)}"
        query = urllib.parse.urlencode({"uploadType": "media", "name": key})
        with open(path, "rb") as f:
            request = urllib.request.Request(f"{url}/upload/storage/v1/b/{bucket}/o?{query}", data=f.read(),
                                             method="POST", headers={"Content-Type": "application/octet-stream"})
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(upload, files))


def gcs_noop(work: str, n: int, rows: list) -> None:
    from benchmarks.chain_steps import chain
    from rigging.testing import LatencyProxy, emulator_env, start_gcs_emulator

    emulator = start_gcs_emulator(linear_writes=True)
    try:
        bucket = emulator.create_bucket()
        prefix = f"{bucket}/store"
        local = os.path.join(work, "gcs-copy")
        built_store(chain(n), local, prefix)
        _upload_tree(emulator.url, bucket[len("gs://"):], local, "store")
        env = {**os.environ, **emulator_env(emulator.url), "PYTHONPATH": os.pathsep.join(filter(None, [_root(), os.environ.get("PYTHONPATH")]))}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        path = _experiment_file(work, "chain", n)
        marin = os.path.join(os.path.dirname(sys.executable), "marin")
        with LatencyProxy(emulator.url, delay_s=DELAY_S) as proxy:
            slow_env = {**env, **emulator_env(proxy.url)}
            for verb in ("run", "plan", "status"):
                proxy.reset()
                t = _timed([marin, verb, path, "--prefix", prefix], slow_env, _root())
                count = proxy.count()
                rows.append((f"marin {verb}, {n:,} cached gs:// steps, {DELAY_S * 1e3:.0f} ms/request",
                             t, f"{count} requests, {count / n:.3f}/step"))
    finally:
        emulator.stop()


def gcs_build(work: str, n: int, rows: list) -> None:
    """A fresh build of a chain of ``n`` trivial steps on gs://, through the 30 ms proxy: requests
    and wall time per step, and how many of them are not for the step's own file."""
    from rigging.testing import LatencyProxy, emulator_env, start_gcs_emulator

    emulator = start_gcs_emulator(linear_writes=True)
    try:
        bucket = emulator.create_bucket()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_root(), os.environ.get("PYTHONPATH")]))}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        path = _experiment_file(work, "chain", n)
        marin = os.path.join(os.path.dirname(sys.executable), "marin")
        with LatencyProxy(emulator.url, delay_s=DELAY_S) as proxy:
            t = _timed([marin, "run", path, "--prefix", f"{bucket}/build", "--warm-workers"],
                       {**env, **emulator_env(proxy.url)}, _root())
            count = proxy.count()
        rows.append((f"build of one trivial step on gs://: requests ({n}-step chain, {DELAY_S * 1e3:.0f} ms/request)",
                     t / n, f"{count / n:.1f} requests/step, {count / n - OWN_FILE_REQUESTS:.1f} beyond its own file"))
    finally:
        emulator.stop()


def _make_build(folder: str, kind: str, n: int, jobs: int) -> float:
    """GNU make building the same graph, one trivial Python process per target."""
    os.makedirs(folder, exist_ok=True)
    py = f"{sys.executable} -c 'import sys; open(sys.argv[1], \"w\").write(sys.argv[1])'"
    with open(os.path.join(folder, "Makefile"), "w") as f:
        f.write(f"all: {' '.join(f't{i}' for i in range(n)) if kind == 'fan' else f't{n - 1}'}\n")
        for i in range(n):
            dep = f" t{i - 1}" if kind == "chain" and i else ""
            f.write(f"t{i}:{dep}\n\t@{py} $@\n")
    start = time.perf_counter()
    subprocess.run(["make", "-s", "-C", folder, f"-j{jobs}"], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def local_builds(work: str, n: int, rows: list) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_root(), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    marin = os.path.join(os.path.dirname(sys.executable), "marin")
    for kind, jobs in (("chain", 1), ("fan", 2)):
        path = _experiment_file(work, kind, n)
        prefix = os.path.join(work, f"build-{kind}")
        t = _timed([marin, "run", path, "--prefix", prefix, "-j", str(jobs), "--warm-workers"], env, _root())
        rows.append((f"marin run -j {jobs}, fresh {n:,}-step {kind}", t, f"{t / n * 1e3:.1f} ms/step"))
        t = _make_build(os.path.join(work, f"make-{kind}"), kind, n, jobs)
        rows.append((f"GNU make -j {jobs}, fresh {n:,}-target {kind} (python per target)", t,
                     f"{t / n * 1e3:.1f} ms/step"))
        for tool in ("snakemake", "dvc"):
            if shutil.which(tool) is None:
                rows.append((f"{tool}, fresh {n:,}-step {kind}", None, "not installed"))


def main() -> None:
    gcs_n = int(os.environ.get("BENCH_GCS_STEPS", "1000"))
    build_n = int(os.environ.get("BENCH_BUILD_STEPS", "1000"))
    gcs_build_n = int(os.environ.get("BENCH_GCS_BUILD_STEPS", "10"))
    work = tempfile.mkdtemp(prefix="marin-bench-scale-")
    rows: list = []
    try:
        gcs_noop(work, gcs_n, rows)
        gcs_build(work, gcs_build_n, rows)
        local_builds(work, build_n, rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n== scale: gs:// no-op through a 30 ms proxy; fresh local builds beside GNU make ==")
    width = max(len(r[0]) for r in rows)
    for label, seconds, note in rows:
        shown = f"{seconds * 1e3:10.0f} ms" if seconds is not None else f"{'-':>13}"
        print(f"{label:<{width}}  {shown}  {note or ''}")
    print()
    by_label = {label: (seconds, note) for label, seconds, note in rows}
    for verb in ("run", "plan", "status"):
        seconds, note = by_label[f"marin {verb}, {gcs_n:,} cached gs:// steps, {DELAY_S * 1e3:.0f} ms/request"]
        print(f"goal {verb}: <= 0.02 requests/cached step: {note.split(', ')[1]}"
              + (f"; goal no-op run < 3 s: {seconds:.2f} s" if verb == "run" else ""))
    gcs_build_label = f"build of one trivial step on gs://: requests ({gcs_build_n}-step chain, {DELAY_S * 1e3:.0f} ms/request)"
    print(f"goal build on gs:// <= 15 requests/step beyond its own files: {by_label[gcs_build_label][1].split(', ')[1]}")
    for kind, jobs in (("chain", 1), ("fan", 2)):
        ours = by_label[f"marin run -j {jobs}, fresh {build_n:,}-step {kind}"][0]
        make = by_label[f"GNU make -j {jobs}, fresh {build_n:,}-target {kind} (python per target)"][0]
        print(f"goal fresh {kind} <= 30 ms/step: {ours / build_n * 1e3:.1f} ms/step; marin / GNU make: {ours / make:.2f}x")


if __name__ == "__main__":
    main()
