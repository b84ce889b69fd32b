"""``marin gc`` judges a run alive from where its pid means something (``rigging.pids``): a live run
in another PID namespace of this host (a container sharing its name) keeps what it planned, a run
whose root says nothing of its process keeps it until the root expires; the run root's heartbeat
never writes an older set of outputs over a newer one; an output a live lease spares keeps its done
marker; and gc says one line per output."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time

import pytest
import steps_for_tests as t
from click.testing import CliRunner

from marin.cli.main import cli
from marin.execution.store import run_roots
from marin.execution.store.done_index import read_index
from marin.execution.store.gc import SPARED_LEASE, SPARED_RUN, collect_garbage, find_garbage, remove_garbage
from marin.execution.store.roots import GcRoot, register_root
from marin.execution.store.run_roots import RUNS_DIR, RunRoot, live_runs
from marin.execution.store.step_record import StepRecord
from marin.execution.store.store import StepStore
from rigging import filesystem as fs
from rigging.lease import Lease
from testsupport.namespaces import gone_place, in_another_pid_namespace, of_another_boot, of_another_namespace


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """A temporary folder of the test's own: `marin gc` also sweeps the machine's, which other
    processes of this machine use."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr("tempfile.tempdir", None)


def test_a_gc_from_another_pid_namespace_removes_nothing_a_live_run_planned(tmp_path, own_tmp):
    # The reproduction: a live run here, `unshare -Urpf --mount-proc marin gc --yes` beside it.
    prefix = str(tmp_path / "store")
    names = t.built_diamond(prefix)
    register_root(prefix, GcRoot.for_run(["other.py"], [], name="keeps-nothing"))
    root = RunRoot(prefix, ttl=60)
    root.before_planning()
    assert root.hold([names["g/a"], names["g/d"]])
    try:
        marin = os.path.join(os.path.dirname(sys.executable), "marin")
        gc = in_another_pid_namespace([marin, "gc", "--prefix", prefix, "--yes"])
        assert gc.returncode == 0, gc.stdout + gc.stderr
        assert fs.exists(root.path), gc.stdout  # not "a temporary root of a run that is gone"
        assert t.done_steps(prefix, names) == {"g/a", "g/d"}, gc.stdout
        assert f"kept {names['g/a']} ({SPARED_RUN})" in gc.stdout
    finally:
        root.end()


@pytest.mark.parametrize("where", ["another PID namespace", "another boot", "not recorded", "gone"])
def test_a_run_whose_pid_cannot_be_checked_here_keeps_its_outputs_until_its_root_expires(tmp_path, where):
    # A root naming a pid that is gone from this namespace, written with this host's name: only where
    # its pid can be checked (same boot and namespace) is its run known gone; else its expiry decides.
    prefix = str(tmp_path / "store")
    names = t.built_diamond(prefix)
    gone = gone_place()
    place = {"another PID namespace": of_another_namespace(gone), "another boot": of_another_boot(gone),
             "not recorded": None, "gone": gone}[where]
    path = fs.join(prefix, RUNS_DIR, "1-elsewhere.json")
    body = {"holder": f"{socket.gethostname()}:{gone.pid}:x", "expires_at": time.time() + 0.8,
            "outputs": [names["g/a"]], **({"process": place.to_json()} if place is not None else {})}
    fs.atomic_write(path, json.dumps(body))
    assert [run.process for run in live_runs(prefix)] == ([] if where == "gone" else [place])
    report = collect_garbage(StepStore(prefix), keep=set())
    if where == "gone":
        assert names["g/a"] in report.removed and [left.path for left in report.leftovers] == [path]
        return
    assert (names["g/a"], SPARED_RUN) in report.spared and t.done_steps(prefix, names) == {"g/a"}
    assert fs.exists(path)
    time.sleep(max(0.0, body["expires_at"] - time.time()) + 0.05)
    report = collect_garbage(StepStore(prefix), keep=set())
    assert names["g/a"] in report.removed and not fs.exists(path)


def test_an_output_spared_by_a_live_lease_keeps_its_done_marker(tmp_path):
    prefix = str(tmp_path / "store")
    names = t.built_diamond(prefix)
    store = StepStore(prefix)
    report = find_garbage(store, keep=set())
    # Between finding and removing, a runner took the lease of one output.
    lease = Lease.acquire(StepRecord(store.output_path(names["g/b"])).meta, ttl=300, holder="elsewhere:1:runner")
    assert lease is not None
    try:
        remove_garbage(store, report)
    finally:
        lease.release()
    assert report.spared == [(names["g/b"], SPARED_LEASE)]
    assert t.done_steps(prefix, names) == {"g/b"} and set(read_index(prefix)) == {names["g/b"]}


def test_gc_says_one_line_per_output(tmp_path, own_tmp):
    prefix = str(tmp_path / "store")
    names = t.built_diamond(prefix)
    register_root(prefix, GcRoot.for_run(["other.py"], [], name="keeps-nothing"))
    root = RunRoot(prefix, ttl=60)  # a live run of this process, which the finding does not look at
    root.before_planning()
    assert root.hold([names["g/a"]])
    try:
        result = CliRunner().invoke(cli, ["gc", "--prefix", prefix, "--yes"])
    finally:
        root.end()
    assert result.exit_code == 0, result.output
    for output in names.values():
        lines = [line for line in result.output.splitlines() if output in line]
        assert len(lines) == 1, result.output
    assert f"kept {names['g/a']} ({SPARED_RUN})" in result.output
    assert f"removing {names['g/e']} (" in result.output and "removed 4 outputs" in result.output


def test_a_heartbeat_built_before_outputs_were_added_never_lands_after_them(tmp_path, monkeypatch):
    prefix = str(tmp_path / "store")
    root = RunRoot(prefix, ttl=2.0)  # a beat every 0.5 s
    assert root.hold(["g/first"])  # starts the heartbeat
    beating, added, landed = threading.Event(), threading.Event(), threading.Event()
    write = run_roots.fs.atomic_write

    def slow_beat(path, data, **kwargs):
        # The heartbeat's write has its body and is slow to land; meanwhile the run adds an output.
        if threading.current_thread().name == "run-root" and not beating.is_set():
            beating.set()
            added.wait(1.0)
            write(path, data, **kwargs)
            landed.set()
            return
        write(path, data, **kwargs)

    monkeypatch.setattr(run_roots.fs, "atomic_write", slow_beat)
    try:
        assert beating.wait(10)
        holding = threading.Thread(target=lambda: (root.hold(["g/second"]), added.set()))
        holding.start()
        holding.join(10)
        assert landed.wait(10)
        # The slow beat landed, before or after hold() wrote: the root names the new output.
        assert json.loads(fs.read_text(root.path))["outputs"] == ["g/first", "g/second"]
    finally:
        added.set()
        root.end()
