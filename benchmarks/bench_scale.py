"""Scale: no-op commands on 1,000 cached steps on gs:// (requests and time with 30 ms round
trips), and fresh builds of trivial chains and fans locally beside GNU make.

The gs:// store is the GCS emulator behind :class:`testsupport.latency.LatencyProxy`, which adds a
fixed delay to every request (a cloud VM's round trip) and counts requests. The cached graph is
really built (by the runner, into ``memory://``) and then copied, so its records are the ones a
user's store has.

Goals (issue 17): at most 0.02 requests per cached step for no-op run/plan/status; no-op
``marin run`` on 1,000 cached gs:// steps under 3 s with the 30 ms delay; building a trivial step
on gs:// at most about 15 requests beyond its own files; a fresh build of trivial steps at most
30 ms per step on 2 cores.

Beside marin, the same local graphs are built by GNU make (a Python process per target: the
floor) and, where the ``bench`` extra is installed (``make bench-peers``), by Snakemake and DVC.

Sizes: ``BENCH_GCS_STEPS`` (default 1000), ``BENCH_GCS_BUILD_STEPS`` (default 10),
``BENCH_BUILD_STEPS`` (default 1000) and ``BENCH_DVC_STEPS`` (default 100). Only part of it:
``python -m benchmarks.bench_scale local`` (or ``gcs``).
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
    def accelerator_wait(self, planned, line) -> None: ...
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

    from marin.execution.run.runner import StepRunner

    runner = StepRunner(prefix=local_root, max_parallel=1, strict_env=False, config=None, reporter=_Silent(),
                        client=_in_process_client())
    # A mock, not a function of this file: the steps' code digests follow what rigging.filesystem
    # calls, and a function here would enter them, so every built step would read as changed code.
    with mock.patch("os.fsync"):
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
    from testsupport.gcs import emulator_env, start_gcs_emulator
    from testsupport.latency import LatencyProxy

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
    from testsupport.gcs import emulator_env, start_gcs_emulator
    from testsupport.latency import LatencyProxy

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


_TRIVIAL = "import sys; open(sys.argv[1], \"w\").write(sys.argv[1])"


def _make_build(folder: str, kind: str, n: int, jobs: int, script: str = _TRIVIAL) -> float:
    """GNU make building the same graph, one trivial Python process per target (``script``, given
    the target's name; no single quotes in it)."""
    os.makedirs(folder, exist_ok=True)
    py = f"{sys.executable} -c '{script}'"
    with open(os.path.join(folder, "Makefile"), "w") as f:
        f.write(f"all: {' '.join(f't{i}' for i in range(n)) if kind == 'fan' else f't{n - 1}'}\n")
        for i in range(n):
            dep = f" t{i - 1}" if kind == "chain" and i else ""
            f.write(f"t{i}:{dep}\n\t@{py} $@\n")
    start = time.perf_counter()
    subprocess.run(["make", "-s", "-C", folder, f"-j{jobs}"], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def _tool(name: str) -> str | None:
    """``name``'s executable: this interpreter's environment first (the ``bench`` extra), then PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    return beside if os.access(beside, os.X_OK) else shutil.which(name)


def _timed_peer(cmd: list[str], env: dict[str, str], cwd: str, timeout: float) -> float:
    """Like :func:`_timed`, keeping the peer's output (where Snakemake says why it failed)."""
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{os.path.basename(cmd[0])} failed: {done.stdout[-2000:]}")
    return elapsed


def _snakemake_build(exe: str, folder: str, kind: str, n: int, jobs: int, timeout: float,
                     recursion_limit: int | None = None, script: str = _TRIVIAL) -> float:
    """Snakemake building the same graph: one wildcard rule, each job the same trivial Python
    process as GNU make's, run through Snakemake's shell (bash) as make's runs through sh.

    Snakemake builds its DAG recursively: a chain deeper than about 500 fails with RecursionError
    at Python's default limit; ``recursion_limit`` runs its CLI with a higher one."""
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    target = f'expand("t{{i}}", i=range({n}))' if kind == "fan" else f'"t{n - 1}"'
    deps = 'lambda w: [f"t{int(w.i) - 1}"] if int(w.i) > 0 else []' if kind == "chain" else "[]"
    with open(os.path.join(folder, "Snakefile"), "w") as f:
        f.write(textwrap.dedent(f"""\
            rule all:
                input: {target}

            rule t:
                input: {deps}
                output: "t{{i}}"
                wildcard_constraints: i=r"\\d+"
                shell: {repr(f"{sys.executable} -c '{script}' {{output}}")}
        """))
    cmd = [exe]
    if recursion_limit:
        with open(exe) as f:
            python = f.readline()[2:].strip()  # the console script's interpreter (its #! line)
        cmd = [python, "-c", f"import sys; sys.setrecursionlimit({recursion_limit}); sys.argv[0] = 'snakemake'; "
               "from snakemake.cli import main; sys.exit(main())"]
    # Quiet but for errors (make -s prints nothing either; `--quiet all` would hide why it failed).
    return _timed_peer(cmd + ["--snakefile", "Snakefile", "--cores", str(jobs), "--quiet", "host", "progress",
                              "reason", "rules"], {**os.environ}, folder, timeout)


def _dvc_build(exe: str, folder: str, kind: str, n: int, timeout: float) -> float:
    """``dvc repro`` of the same graph as a dvc.yaml of ``n`` stages in a fresh git + DVC
    repository (set up before the clock starts); each stage the same trivial Python process.
    ``dvc repro`` has no jobs option: stages run one after another."""
    import json

    os.makedirs(folder, exist_ok=True)
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True, env=env)
    subprocess.run([exe, "init", "-q"], cwd=folder, check=True, env=env)
    subprocess.run([exe, "config", "core.analytics", "false"], cwd=folder, check=True, env=env)
    stages = {}
    for i in range(n):
        stage: dict = {"cmd": f"{sys.executable} -c '{_TRIVIAL}' t{i}", "outs": [f"t{i}"]}
        if kind == "chain" and i:
            stage["deps"] = [f"t{i - 1}"]
        stages[f"t{i}"] = stage
    with open(os.path.join(folder, "dvc.yaml"), "w") as f:
        json.dump({"stages": stages}, f, indent=1)  # JSON is YAML
    return _timed_peer([exe, "repro", "--quiet"], env, folder, timeout)


def _peer(rows: list, label: str, size: int, build) -> None:
    """One peer's row: its time, or why there is none (a timeout or a failure, said in the row)."""
    try:
        t = build()
    except subprocess.TimeoutExpired as e:
        rows.append((label, None, f"over {e.timeout:.0f} s, stopped"))
    except (RuntimeError, subprocess.CalledProcessError) as e:
        lines = [line for line in str(e).splitlines() if "Error" in line and not line.rstrip().endswith(":")] or str(e).strip().splitlines() or [repr(e)]
        rows.append((label, None, f"failed: {lines[0][:120]}"))
    else:
        rows.append((label, t, f"{t / size * 1e3:.1f} ms/step"))


RECURSION_LIMIT = 100_000


def peer_label(tool: str, kind: str, n: int, jobs: int, raised: bool = False) -> str:
    if tool == "snakemake":
        return (f"Snakemake --cores {jobs}, fresh {n:,}-step {kind} (python per job"
                + (f"; recursion limit {RECURSION_LIMIT:,})" if raised else ")"))
    return f"DVC repro (no -j: one at a time), fresh {n:,}-stage {kind} (python per stage)"


def local_builds(work: str, n: int, rows: list, dvc_n: int | None = None, peer_timeout: float = 900) -> None:
    """Fresh builds of a chain (``-j 1``) and a fan (2 jobs) of ``n`` trivial steps: marin, GNU make,
    and Snakemake and DVC where installed (``pyproject.toml``'s ``bench`` extra). DVC builds
    ``dvc_n`` steps (default ``BENCH_DVC_STEPS``, 100: its cost per stage grows with the graph,
    about 2 s a stage at 1,000), and marin builds that size too so the ratio is like for like."""
    dvc_n = dvc_n if dvc_n is not None else int(os.environ.get("BENCH_DVC_STEPS", "100"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_root(), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    marin = os.path.join(os.path.dirname(sys.executable), "marin")
    snakemake, dvc = _tool("snakemake"), _tool("dvc")

    def marin_row(kind: str, size: int, jobs: int, suffix: str = "") -> None:
        path = _experiment_file(work, kind, size)
        prefix = os.path.join(work, f"build-{kind}-{size}")
        t = _timed([marin, "run", path, "--prefix", prefix, "-j", str(jobs), "--warm-workers"], env, _root())
        rows.append((f"marin run -j {jobs}, fresh {size:,}-step {kind}{suffix}", t, f"{t / size * 1e3:.1f} ms/step"))

    for kind, jobs in (("chain", 1), ("fan", 2)):
        marin_row(kind, n, jobs)
        t = _make_build(os.path.join(work, f"make-{kind}"), kind, n, jobs)
        rows.append((f"GNU make -j {jobs}, fresh {n:,}-target {kind} (python per target)", t,
                     f"{t / n * 1e3:.1f} ms/step"))
        if snakemake is None:
            rows.append((peer_label("snakemake", kind, n, jobs), None, "not installed (the bench extra)"))
        else:
            _peer(rows, peer_label("snakemake", kind, n, jobs), n,
                  lambda kind=kind, jobs=jobs: _snakemake_build(snakemake, os.path.join(work, f"snakemake-{kind}"),
                                                                kind, n, jobs, peer_timeout))
            if rows[-1][1] is None and "RecursionError" in (rows[-1][2] or ""):
                # As a user would: run it again with Python's recursion limit raised.
                _peer(rows, peer_label("snakemake", kind, n, jobs, raised=True), n,
                      lambda kind=kind, jobs=jobs: _snakemake_build(
                          snakemake, os.path.join(work, f"snakemake-{kind}"), kind, n, jobs, peer_timeout,
                          recursion_limit=RECURSION_LIMIT))
        if dvc is None:
            rows.append((peer_label("dvc", kind, dvc_n, jobs), None, "not installed (the bench extra)"))
            continue
        if dvc_n != n:
            marin_row(kind, dvc_n, jobs, " (DVC's size)")
        _peer(rows, peer_label("dvc", kind, dvc_n, jobs), dvc_n,
              lambda kind=kind: _dvc_build(dvc, os.path.join(work, f"dvc-{kind}"), kind, dvc_n, peer_timeout))


def local_ratios(rows: list, n: int, dvc_n: int) -> list[str]:
    """Per-step ratios of marin to GNU make, Snakemake and DVC (each at the peer's own size)."""
    by_label = {label: seconds for label, seconds, _ in rows}
    lines = []
    for kind, jobs in (("chain", 1), ("fan", 2)):
        ours = by_label[f"marin run -j {jobs}, fresh {n:,}-step {kind}"]
        make = by_label[f"GNU make -j {jobs}, fresh {n:,}-target {kind} (python per target)"]
        parts = [f"{ours / n * 1e3:.1f} ms/step", f"marin / GNU make: {ours / make:.2f}x"]
        snake = by_label.get(peer_label("snakemake", kind, n, jobs))
        raised = by_label.get(peer_label("snakemake", kind, n, jobs, raised=True))
        if snake:
            parts.append(f"marin / Snakemake: {ours / snake:.2f}x")
        elif raised:
            parts.append(f"marin / Snakemake: {ours / raised:.2f}x (its recursion limit raised)")
        dvc = by_label.get(peer_label("dvc", kind, dvc_n, jobs))
        if dvc:
            ours_at = by_label.get(f"marin run -j {jobs}, fresh {dvc_n:,}-step {kind} (DVC's size)", ours)
            parts.append(f"marin / DVC: {ours_at / dvc:.2f}x" + (f" (both at {dvc_n:,} steps)" if dvc_n != n else ""))
        lines.append(f"goal fresh {kind} <= 30 ms/step: " + "; ".join(parts))
    return lines


def main(parts: list[str] | None = None) -> None:
    """``python -m benchmarks.bench_scale [gcs] [local]`` (both by default)."""
    parts = parts or ["gcs", "local"]
    gcs_n = int(os.environ.get("BENCH_GCS_STEPS", "1000"))
    build_n = int(os.environ.get("BENCH_BUILD_STEPS", "1000"))
    gcs_build_n = int(os.environ.get("BENCH_GCS_BUILD_STEPS", "10"))
    dvc_n = int(os.environ.get("BENCH_DVC_STEPS", "100"))
    work = tempfile.mkdtemp(prefix="marin-bench-scale-")
    rows: list = []
    try:
        if "gcs" in parts:
            gcs_noop(work, gcs_n, rows)
            gcs_build(work, gcs_build_n, rows)
        if "local" in parts:
            local_builds(work, build_n, rows, dvc_n)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    titles = {"gcs": "gs:// no-op through a 30 ms proxy", "local": "fresh local builds beside GNU make, Snakemake, DVC"}
    print(f"\n== scale: {'; '.join(titles[p] for p in parts)} ==")
    width = max(len(r[0]) for r in rows)
    for label, seconds, note in rows:
        shown = f"{seconds * 1e3:10.0f} ms" if seconds is not None else f"{'-':>13}"
        print(f"{label:<{width}}  {shown}  {note or ''}")
    print()
    by_label = {label: (seconds, note) for label, seconds, note in rows}
    if "gcs" in parts:
        for verb in ("run", "plan", "status"):
            seconds, note = by_label[f"marin {verb}, {gcs_n:,} cached gs:// steps, {DELAY_S * 1e3:.0f} ms/request"]
            print(f"goal {verb}: <= 0.02 requests/cached step: {note.split(', ')[1]}"
                  + (f"; goal no-op run < 3 s: {seconds:.2f} s" if verb == "run" else ""))
        gcs_build_label = f"build of one trivial step on gs://: requests ({gcs_build_n}-step chain, {DELAY_S * 1e3:.0f} ms/request)"
        print(f"goal build on gs:// <= 15 requests/step beyond its own files: {by_label[gcs_build_label][1].split(', ')[1]}")
    if "local" in parts:
        for line in local_ratios(rows, build_n, dvc_n):
            print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
