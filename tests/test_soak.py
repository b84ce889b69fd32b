"""The soak test with a small count: kills and races on the soak graph, then every check of ``make soak``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from testsupport.faults import FaultKind
from testsupport.leases import place_elsewhere
from testsupport.soak import observe as seen
from testsupport.soak.graph import Call

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_soak_small_count_survives_kills_and_races(tmp_path):
    # Seed 112 draws, in two rounds, a kill of a step's process group just after a sweep round was
    # built (mid-expansion), and a race of two runners with a kill of the warm template during the
    # dedup's shuffle map wave. No round kills at a checkpoint, so the model (the longest step of
    # every run that builds it) trains 8 steps, 2 checkpoints, rather than `make soak`'s 48.
    proc = subprocess.run([sys.executable, "-m", "testsupport.soak", "--seed", "112", "--rounds", "2",
                           "--train-steps", "8", "--workdir", str(tmp_path / "soak")], cwd=ROOT,
                          capture_output=True, text=True, timeout=280)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "soak: OK" in out and ", 8 training steps" in out
    assert "survived" in out and "bit for bit equal to the clean run" in out
    assert "KILL" in out, "the seed must draw at least one kill"
    # Its kill rounds wait for a step process (or a checkpoint) before they kill: a step process,
    # its group or the warm template, not only runners (warm workers hid those from the soak once).
    assert re.search(r"KILL (step|step-group|template) \d+ of runner", out), out[-6000:]
    assert re.search(r"survived \d+ kills \(\d+ runner, \d+ step, \d+ step-group, \d+ template, \d+ shuffle-worker, "
                     r"\d+ warm-accelerator\)", out)
    assert re.search(r"KILL .*(the shuffle's (map|reduce) wave|mid-expansion)", out), out[-6000:]
    assert re.search(r"kill moments: \d+ time, \d+ step-start, \d+ checkpoint, \d+ shuffle-map.*, \d+ shuffle-reduce"
                     r".*, \d+ mid-expansion", out)
    # The dedup's zephyr shuffle and the sweep's expansion were built and checked against the clean run.
    assert "soak/dedup: 4 files (sidecars, summary) byte for byte equal to the clean run" in out
    assert re.search(r"sweep: expanded into the clean run's 8 steps, names and hashes", out)
    assert "builds: every step published once plus once per removal" in out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_soak_with_a_store_that_fails_small_count(tmp_path):
    # The faulty store's soak (`--prefix gs --faults 0.05`) on the small graph, on this host: seed 3
    # draws a kill first, then a race or another kill, 5% of the runners' requests faulted.
    # (Runners on Ray nodes: the long runs of docs/reliability.md; testsupport.soak.nodes is tested
    # in tests/test_ray_multinode.py.)
    proc = subprocess.run([sys.executable, "-m", "testsupport.soak", "--prefix", "gs", "--faults", "0.05",
                           "--rounds", "2", "--seed", "3", "--graph", "small", "--nodes", "0",
                           "--workdir", str(tmp_path / "soak")], cwd=ROOT, capture_output=True, text=True,
                          timeout=280)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    lines = proc.stdout.splitlines()
    faults = [line for line in lines if line.startswith("fault ")]
    assert [f.split(":")[0] for f in faults] == [f"fault {k.value}" for k in FaultKind]
    assert sum(int(f.rsplit(" ", 1)[1]) for f in faults) >= 3, faults
    # The fault lines come first, then the soak's usual verdict.
    assert lines.index(faults[-1]) < next(i for i, x in enumerate(lines) if x.startswith("soak seed 3 on gs"))
    assert lines[-1] == "soak: OK"
    # Round 1 of seed 3 is a kill: of a step's process when one is running at the drawn moment, else
    # of the runner (a busy host moves the moment). Round 2 is drawn after round 1's own draws, which
    # that moment decides: a race of runners or another kill. Every round ran, with the faults.
    rounds = re.findall(r"round (\d+): (one runner, one kill|race of [23] runners)", out)
    assert [(n, kind.startswith("one runner")) for n, kind in rounds][:1] == [("1", True)] and len(rounds) == 2, rounds
    assert re.search(r"KILL (runner \S+ \(pid|(step|step-group|template) \d+ of runner)", out)
    assert "builds: every step published once plus once per removal" in out
    assert "marin verify:" in out and "no problems" in out
    assert re.search(r"resumable uploads: \d+ opened, \d+ finished, \d+ cancelled, \d+ left open", out)
    assert "attempt folders no record names: 0" in out
    events = (tmp_path / "soak" / "faults.log").read_text().splitlines()
    assert len(events) == sum(int(f.rsplit(" ", 1)[1]) for f in faults)
    assert all(re.match(r" *\d+\.\d+s [\w-]+ +(GET|POST|PUT|PATCH|DELETE) /", e) for e in events), events[:3]


def test_soak_rejects_bad_options(capsys):
    # In this process: each is refused by its argument parser, before the soak starts anything.
    from testsupport.soak.__main__ import main

    for argv, message in ((["--rounds", "-1"], "--rounds must be >= 0"),
                          (["--train-steps", "0"], "--train-steps must be >= 1, got 0"),
                          (["--faults", "0.05"], "--faults needs --prefix gs"),
                          (["--prefix", "gs", "--faults", "1.5"], "--faults must be in [0, 1), got 1.5")):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2 and message in capsys.readouterr().err, argv


def test_the_soak_refuses_a_workdir_an_earlier_soak_left(tmp_path):
    # Its call counts would read as every step built twice.
    (tmp_path / "calls-soak.txt").write_text("soak/sweep/trial-0 end 1 1 1\n")
    proc = subprocess.run([sys.executable, "-m", "testsupport.soak", "--workdir", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and f"--workdir {tmp_path} is not empty" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calls-soak.txt"]


def test_the_soak_tells_a_runners_template_its_steps_and_their_workers_apart():
    # The soak finds what to kill by command line and parent: it once looked for a template by a
    # command line the template no longer had, and killed runners only.
    from fray.pool import WorkerPool
    from zephyr import Dataset
    from zephyr.execution import run
    from zephyr.writers import CollectSink

    me = os.getpid()
    # Runners that other tests in this process left open keep their templates: look only at what
    # this pool starts.
    earlier = {p.pid for p in seen.templates(me) + seen.step_processes(me) + seen.shuffle_workers(me)}

    def alive(p: psutil.Process) -> bool:
        # A process that exited between the listing and now (the template forks short-lived helpers
        # too, seen once on a loaded machine) is not one of the three asked about.
        try:
            return p.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
        except psutil.NoSuchProcess:
            return False

    def new(processes: list) -> list:
        return [p for p in processes if p.pid not in earlier and alive(p)]

    pool = WorkerPool()
    try:
        # A step (a call forked from the pool's template) whose zephyr pipeline runs on a worker.
        sleeping = Dataset.from_items([[30.0]]).map(time.sleep)
        handle = pool.submit(run, sleeping, CollectSink(), in_process=False, max_parallel=1)
        deadline = time.monotonic() + 60
        while not new(seen.shuffle_workers(me)):
            if handle.done():
                handle.result()  # raises what the call raised
            assert time.monotonic() < deadline, "the call never started its worker"
            time.sleep(0.05)
        templates, steps, workers = new(seen.templates(me)), new(seen.step_processes(me)), new(seen.shuffle_workers(me))
        assert len(templates) == 1 and len(steps) == 1 and len(workers) == 1
        assert steps[0].ppid() == templates[0].pid and workers[0].ppid() == steps[0].pid
        assert {steps[0].pid, workers[0].pid} <= seen.tree_pids(steps[0])  # and multiprocessing's resource tracker
    finally:
        pool.shutdown()


def _record(prefix: Path, name: str, **records: dict) -> None:
    meta = prefix / f"{name}-0123456789abcdef" / ".marin"
    meta.mkdir(parents=True, exist_ok=True)
    for record, body in records.items():
        (meta / f"{record}.json").write_text(json.dumps(body))


def test_the_soaks_ledger_counts_publishes_and_sees_a_finished_step_built_again(tmp_path):
    ledger = seen.BuildLedger()
    _record(tmp_path, "soak/raw", success={"finished_at": 10.0}, provenance={"started_at": 5.0, "attempts": 2})
    _record(tmp_path, "soak/sweep/trial-0", provenance={"started_at": 5.0})  # not published yet
    ledger.sample(str(tmp_path))
    ledger.sample(str(tmp_path))  # seen again between rounds: the same build
    assert seen.build_problems(["soak/raw"], ledger, Counter()) == []
    assert seen.build_problems(["soak/sweep/trial-0"], ledger, Counter()) == [
        "soak/sweep/trial-0: published 0 times, expected 1 (1 + 0 removal(s) by the soak)"]
    assert ledger.attempts["soak/raw"] == 2
    # The soak removed the output and a runner built it anew: one publish per removal.
    _record(tmp_path, "soak/raw", success={"finished_at": 20.0}, provenance={"started_at": 15.0})
    ledger.sample(str(tmp_path))
    assert seen.build_problems(["soak/raw"], ledger, Counter({"soak/raw": 1})) == []
    assert seen.build_problems(["soak/raw"], ledger, Counter()) == [
        "soak/raw: published 2 times, expected 1 (1 + 0 removal(s) by the soak)"]
    # A runner ran the finished step again (its provenance is written just before publishing).
    _record(tmp_path, "soak/raw", provenance={"started_at": 25.0})
    ledger.sample(str(tmp_path))
    assert [p.split(":")[0] for p in seen.build_problems(["soak/raw"], ledger, Counter({"soak/raw": 1}))] == [
        "built again after it was done"]


def test_the_soak_counts_a_trial_body_run_twice_unless_the_soak_killed_it():
    def end(pid: int, ppid: int = 1, gppid: int = 1) -> Call:
        return Call("soak/sweep/trial-0", "end", pid, ppid, gppid)

    trials = ["soak/sweep/trial-0"]
    assert seen.trial_problems(trials, [end(100)], Counter(), set(), set()) == []
    twice = [end(100), end(200)]
    assert seen.trial_problems(trials, twice, Counter(), set(), set()) == [
        "soak/sweep/trial-0 ran to the end 2 times outside killed processes and runners (all: 2), for 1 build(s) "
        "(1 + removals)"]
    assert seen.trial_problems(trials, twice, Counter({"soak/sweep/trial-0": 1}), set(), set()) == []
    assert seen.trial_problems(trials, twice, Counter(), {100}, set()) == []  # the soak killed the first
    # The first ended in a step forked from a warm template of a runner the soak then killed.
    assert seen.trial_problems(trials, [end(100, ppid=50, gppid=40), end(200)], Counter(), set(), {40}) == []
    assert seen.trial_problems(trials, [], Counter(), set(), set()) == [
        "soak/sweep/trial-0 ran to the end 0 times outside killed processes and runners (all: 0), for 1 build(s) "
        "(1 + removals)"]


def test_the_soak_places_a_running_steps_process_on_another_host(tmp_path):
    from marin.execution.store.records import BuildState, StepRecord

    record = StepRecord(str(tmp_path / "soak" / "model-0123456789abcdef"))
    assert not place_elsewhere(record.output_path)  # no status: nothing running
    record.write_status(BuildState.FAILED, 1, "r", worker="here:12:3.5")
    assert not place_elsewhere(record.output_path)  # not running
    record.write_status(BuildState.RUNNING, 1, "r", worker="here:12:3.5")
    assert place_elsewhere(record.output_path)
    assert (record.read_json(record.status) or {})["worker"] == "another-host:12:3.5"
    assert not seen.written_apart(record.output_path)
    record.write_status(BuildState.RUNNING, 2, "r", attempt_folder=record.attempt_folder(2))
    assert seen.written_apart(record.output_path)
