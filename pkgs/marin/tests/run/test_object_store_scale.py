"""Requests a no-op costs on gs:// (the GCS emulator behind a counting proxy): a few listings for
the whole graph, never a request per step."""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import pytest
import steps_for_tests as t
from click.testing import CliRunner

from marin.execution.core.placeholders import output_path_of
from marin.execution.core.step import Step
from marin.execution.run.outcome import Outcome
from marin.execution.run.runner import StepRunner
from marin.execution.store.done_index import index_folder, read_index
from rigging import filesystem as fs
from rigging.config.discovery import Backend
from testsupport.gcs import start_gcs_emulator, use_gcs_emulator
from testsupport.latency import LatencyProxy

N = 200
# A no-op reads the done index (a page of listing per 1,000 markers), each parent folder of the
# graph once, and (a run) looks for its report; whatever the graph's size.
MAX_NOOP_REQUESTS = 12


@pytest.fixture(scope="module")
def counted_bucket() -> Iterator[tuple[str, LatencyProxy]]:
    """A bucket on an emulator of this module's own, reached through a request-counting proxy."""
    emulator = start_gcs_emulator(linear_writes=True)
    try:
        with LatencyProxy(emulator.url) as proxy, use_gcs_emulator(proxy.url):
            yield emulator.create_bucket(), proxy
    finally:
        emulator.stop()


def _graph(n: int) -> list[Step]:
    """``n`` steps in two folders: a chain in ``scale/`` and one reader of it in ``scale-end/``."""
    previous = None
    for i in range(n - 1):
        previous = Step(name=f"scale/link{i:04d}", fn=t.noop,
                        config=t.LinkConfig(i=i, prev=output_path_of(previous) if previous else None))
    return [Step(name="scale-end/last", fn=t.noop, config=t.LinkConfig(i=n, prev=output_path_of(previous)))]


def _copy_store(src: str, dst: str) -> None:
    for rel, _size in fs.walk_files(src):
        data = fs.read_bytes(fs.join(src, rel))
        if rel.endswith(".json"):
            data = data.replace(src.encode(), dst.encode())
        fs.atomic_write(fs.join(dst, rel), data)


@pytest.fixture(scope="module")
def cached_graph(counted_bucket, tmp_path_factory) -> tuple[str, LatencyProxy]:
    """A really built 200-step graph (run in memory://, copied whole into the bucket)."""
    bucket, proxy = counted_bucket
    memory = "memory://scale-test-build"
    built = StepRunner(prefix=memory, max_parallel=1, strict_env=False, config=None).run(_graph(N))
    assert built.ok and built.count(Outcome.RAN) == N
    prefix = f"{bucket}/store"
    _copy_store(memory, prefix)
    fs.rm_tree(memory)
    assert len(read_index(prefix)) == N
    return prefix, proxy


def _runner(prefix: str) -> StepRunner:
    return StepRunner(prefix=prefix, max_parallel=2, strict_env=False, backend=Backend.LOCAL, config=None)


def test_a_noop_plan_and_run_of_200_cached_steps_cost_a_few_requests(cached_graph):
    prefix, proxy = cached_graph
    proxy.reset()
    plan = _runner(prefix).plan(_graph(N), note_env=True)
    planned = proxy.reset()
    assert all(p.action.name == "CACHED" for p in plan.steps) and len(plan.steps) == N
    assert len(planned) <= MAX_NOOP_REQUESTS, planned

    result = _runner(prefix).run(_graph(N))
    ran = proxy.reset()
    assert result.ok and result.count(Outcome.CACHED) == N
    assert len(ran) <= MAX_NOOP_REQUESTS, ran


def _counted_cli(proxy: LatencyProxy, tmp_path, verb: str, steps: str, prefix: str) -> tuple[Any, list[str]]:
    """``marin VERB`` (in this process) of an experiment file whose ``steps = <steps>`` (an expression
    over this module, imported by the name pytest gave it: it sits in a layer folder, not on
    ``sys.path``), and the requests it made."""
    from marin.cli.main import cli

    experiment = tmp_path / f"exp_{verb}_counted.py"
    experiment.write_text(f"import {__name__} as t\nsteps = t.{steps}\n")
    proxy.reset()
    result = CliRunner().invoke(cli, [verb, str(experiment), "--prefix", prefix], catch_exceptions=False)
    return result, proxy.reset()


def _links(n: int) -> list[Step]:
    """The first ``n`` links of :func:`_graph`'s chain (cached with it), all in ``scale/``."""
    previous = None
    for i in range(n):
        previous = Step(name=f"scale/link{i:04d}", fn=t.noop,
                        config=t.LinkConfig(i=i, prev=output_path_of(previous) if previous else None))
    assert previous is not None
    return [previous]


# A no-op `marin run` of 100 cached steps in one folder (issue 54: 9 requests, goal 5): it lists the
# collection lease (a run with nothing to build writes no temporary root), the done index and the
# steps' folder, reads its GC root (one GET: the generation is asked for only when it must be
# written, which a run that changes nothing never does), and looks for its no-op report (the page a
# run in the same states wrote). The first such run also writes its root and its report page.
NOOP_RUN_REQUESTS = 5


def test_a_noop_marin_run_of_100_cached_steps_costs_5_requests(cached_graph, tmp_path):
    prefix, proxy = cached_graph
    first, _seen = _counted_cli(proxy, tmp_path, "run", "_links(100)", prefix)
    assert first.exit_code == 0 and "100 cached" in first.output, first.output
    again, seen = _counted_cli(proxy, tmp_path, "run", "_links(100)", prefix)
    assert again.exit_code == 0 and "100 cached" in again.output, again.output
    breakdown = _breakdown(seen, "a no-op marin run of 100 cached steps on gs://")
    assert len(seen) == NOOP_RUN_REQUESTS, breakdown
    assert sum(1 for r in seen if "/.marin/roots/" in unquote(r)) == 1, breakdown


def test_status_of_200_cached_steps_costs_a_few_requests(cached_graph, tmp_path):
    prefix, proxy = cached_graph
    status, seen = _counted_cli(proxy, tmp_path, "status", "_graph(200)", prefix)
    assert status.exit_code == 0, status.output
    assert status.stdout.splitlines()[1].split() == ["scale", "199", "199"]
    assert len(seen) <= MAX_NOOP_REQUESTS, seen


def test_an_output_deleted_by_hand_is_not_done_and_the_run_replaces_its_marker(cached_graph):
    prefix, _proxy = cached_graph
    plan = _runner(prefix).plan(_graph(N), explain=False)
    victim = plan.steps[-1]
    fs.rm_tree(victim.output_path)
    assert victim.output_name in read_index(prefix)
    again = _runner(prefix).plan(_graph(N), explain=False)
    assert again.steps[-1].action.name == "RUN"
    assert victim.output_name in read_index(prefix)  # a plan writes nothing
    others = len(fs.listdir(index_folder(prefix)))
    result = _runner(prefix).run(_graph(N))
    assert result.count(Outcome.RAN) == 1 and result.count(Outcome.CACHED) == N - 1
    assert victim.output_name in read_index(prefix) and len(fs.listdir(index_folder(prefix))) == others
    assert os.environ.get("STORAGE_EMULATOR_HOST") == _proxy.url


# Building a step on gs://: its lease, status, log, manifest, provenance, success record and done
# marker, and the lookups around them (issue 17: at most about 15 requests beyond its own files).
BUILD_CHAIN = 3
MAX_BUILD_REQUESTS_PER_STEP = 15
# Measured: the plan lists the done index and the steps' parent folder (2); each step then lists
# .marin/ to take its lease, creates it, lists again to confirm it (that listing also says the step
# is not done and has no earlier status), writes its status and log, lists its output once (files
# for the manifest, leases for the check), lists the parent folder for other builds of the same
# inputs (nondeterminism; a step with inputs once more for early cutoff), writes manifest and
# provenance side by side, lists .marin/ (fencing), creates its success record, writes its done
# marker and marks its lease released (it stays: numbers never repeat on a folder; deleting it was
# one request too): 13 requests, 14 with inputs. Before this count existed: 94.
BUILD_REQUESTS = 2 + 13 + 14 * (BUILD_CHAIN - 1)
# A run with something to build holds a temporary GC root (marin.execution.store.run_roots): it lists
# the collection lease before it plans and again once it has written its root, and deletes the root at
# the end, nothing per step; a run with nothing to do only lists.
RUN_ROOT_REQUESTS = 4


def request_kind(request: str) -> str:
    """``METHOD path`` with the bucket, object names and listing prefixes blanked: what a request is for."""
    method, _, url = request.partition(" ")
    url = re.sub(r"/b/[^/]+/o", "/b/*/o", url)
    url = re.sub(r"/o/[^?]+", lambda m: "/o/…" + _record_name(m.group(0)), url)
    url = re.sub(r"([?&](?:prefix|name)=)([^&]*)", lambda m: m.group(1) + "…" + _record_name(m.group(2)), url)
    return f"{method} {url}"


def _record_name(quoted: str) -> str:
    """The part of an object or folder name that says what it is: ``/.marin/``, ``/lease-N.json`` …"""
    from urllib.parse import unquote

    path = unquote(quoted)
    if path.endswith((".marin/", ".marin/done/")):
        return path[path.rindex("/.marin"):]
    tail = path.rstrip("/").rsplit("/", 1)[-1]
    return "/" + re.sub(r"\d{8}", "N", tail) if tail.startswith(".") or tail.endswith((".json", ".jsonl")) else "/"


def build_chain() -> list[Step]:
    """``BUILD_CHAIN`` trivial steps in a chain (the last one; the others are its inputs)."""
    previous = None
    for i in range(BUILD_CHAIN):
        previous = Step(name=f"built/link{i}", fn=t.noop,
                        config=t.LinkConfig(i=i, prev=output_path_of(previous) if previous else None))
    assert previous is not None
    return [previous]


def _breakdown(seen: list[str], what: str) -> str:
    breakdown = "\n".join(f"{n:4d}  {kind}" for kind, n in Counter(map(request_kind, seen)).most_common())
    print(f"\n{len(seen)} requests to {what}:\n{breakdown}")
    return breakdown


def test_building_a_step_on_gs_costs_at_most_15_requests(counted_bucket):
    bucket, proxy = counted_bucket
    prefix = f"{bucket}/build-count"
    proxy.reset()
    result = _runner(prefix).run(build_chain())
    seen = proxy.reset()
    assert result.ok and result.count(Outcome.RAN) == BUILD_CHAIN, result.failed
    breakdown = _breakdown(seen, f"build {BUILD_CHAIN} trivial steps on gs://")
    assert len(read_index(prefix)) == BUILD_CHAIN
    assert len(seen) <= BUILD_REQUESTS + RUN_ROOT_REQUESTS, breakdown
    assert BUILD_REQUESTS <= MAX_BUILD_REQUESTS_PER_STEP * BUILD_CHAIN


# `marin run` adds its report to the runner's requests: the page and its copy as latest.html, and
# nothing per step (the report takes what the runner knows from the run's result, and looks for a
# step's metrics or tokenized index only where its manifest lists one).
REPORT_REQUESTS = 2
# and its GC root (marin.execution.store.roots): reading the root its targets registered before (none
# here) with its generation and writing it on that condition, once per run, nothing per step; a run that
# changes nothing only reads it. GCS (and fake-gcs-server) names the generation in the answer to the read;
# gcp-storage-emulator, used here, does not, so it is asked for first: one request more.
ROOT_REQUESTS = 3


def test_marin_run_building_on_gs_costs_at_most_15_requests_per_step(counted_bucket, tmp_path):
    bucket, proxy = counted_bucket
    prefix = f"{bucket}/build-count-cli"
    run, seen = _counted_cli(proxy, tmp_path, "run", "build_chain()", prefix)
    assert run.exit_code == 0, run.output
    assert f"{BUILD_CHAIN} ran" in run.stdout
    breakdown = _breakdown(seen, f"marin run {BUILD_CHAIN} trivial steps on gs://")
    assert len(read_index(prefix)) == BUILD_CHAIN
    assert len(seen) <= BUILD_REQUESTS + REPORT_REQUESTS + ROOT_REQUESTS + RUN_ROOT_REQUESTS, breakdown
    assert BUILD_REQUESTS <= MAX_BUILD_REQUESTS_PER_STEP * BUILD_CHAIN
    # The root's read names it in the URL (its write, a multipart upload, in the body).
    assert sum(1 for r in seen if "/.marin/roots/" in unquote(r)) == ROOT_REQUESTS - 1, breakdown


def test_a_manifest_on_gs_reads_each_file_once(counted_bucket):
    from marin.execution.store.manifest import compute_manifest

    bucket, proxy = counted_bucket
    out = f"{bucket}/manifest/out"
    for name in ("a.bin", "sub/b.bin", "sub/c.json"):
        fs.atomic_write(fs.join(out, name), name.encode() * 100)
    proxy.reset()
    manifest = compute_manifest(out)
    seen = proxy.reset()
    assert [e["path"] for e in manifest["files"]] == ["a.bin", "sub/b.bin", "sub/c.json"]
    # One listing of the whole output, then one ranged read per file (its size is the listing's).
    breakdown = _breakdown(seen, "compute the manifest of 3 files on gs://")
    assert len(seen) == 4 and sum("/download/" in r for r in seen) == 3, breakdown
