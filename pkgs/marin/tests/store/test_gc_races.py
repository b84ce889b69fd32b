"""``marin gc`` and runs exclude each other as Nix's collector and builds do
(``marin.execution.store.run_roots``): a collection removes nothing a live run planned, nothing a
root registered after it looked, and waits for runs that are planning; a run waits to plan while
a collection removes; root updates are conditional writes, so concurrent runs keep one another's
outputs; and a damaged record stops the leftover pass for its folder instead of reading as absent."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import steps_for_tests as t
from click.testing import CliRunner

from marin.cli.main import cli
from marin.execution.core.placeholders import output_path_of
from marin.execution.core.step import Step, unhashed_field
from marin.execution.run.runner import StepRunner
from marin.execution.store.gc import SPARED_ROOT, SPARED_RUN, collect_garbage, find_garbage, remove_garbage
from marin.execution.store.layout import attempt_folder
from marin.execution.store.leftovers import ATTEMPT_KIND
from marin.execution.store.roots import GcRoot, read_roots, register_root
from marin.execution.store.run_roots import collection_lock, live_runs
from marin.execution.store.step_record import StepRecord
from marin.execution.store.store import StepStore
from rigging import filesystem as fs


@dataclass(frozen=True)
class GatedConfig:
    """A step that says it started, waits for ``gate`` to exist, then reads its inputs' ``out.txt``."""

    inputs: tuple[Any, ...]
    gate: str = unhashed_field(default="")
    started: str = unhashed_field(default="")


def gated(config: GatedConfig, output_path: str) -> None:
    Path(config.started).touch()
    deadline = time.monotonic() + 60
    while not Path(config.gate).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    fs.atomic_write(fs.join(output_path, "out.txt"), "".join(fs.read_text(fs.join(p, "out.txt")) for p in config.inputs))


def test_a_gc_started_while_a_run_holds_its_root_removes_nothing_the_run_planned(tmp_path):
    prefix = str(tmp_path / "store")
    names = t.built_diamond(prefix)
    g = t.diamond()
    gate, started = tmp_path / "gate", tmp_path / "started"
    reader = Step("g/reader", gated, GatedConfig((output_path_of(g["d"]), output_path_of(g["a"])), str(gate),
                                                 str(started)))
    outcome: dict[str, Any] = {}
    run = threading.Thread(target=lambda: outcome.setdefault(
        "result", StepRunner(prefix=prefix, client=t.InProcessClient()).run([reader])))
    run.start()
    try:
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert started.exists()
        # Nothing is rooted: a collection now finds every output unreachable, the run's inputs too.
        report = collect_garbage(StepStore(prefix), keep=set())
    finally:
        gate.touch()
        run.join(60)
    assert outcome["result"].ok, outcome["result"].steps
    assert report.removed == [names["g/e"]]  # the one output the run did not plan
    assert sorted(report.spared) == sorted((names[n], SPARED_RUN) for n in ("g/a", "g/b", "g/c", "g/d"))
    assert t.done_steps(prefix, names) == {"g/a", "g/b", "g/c", "g/d"}
    assert live_runs(prefix) == []  # its temporary root went with it


def test_a_gc_spares_what_a_root_registered_after_it_looked(tmp_path):
    prefix = str(tmp_path / "store")
    names = t.built_diamond(prefix)
    store = StepStore(prefix)
    report = find_garbage(store, keep=set())
    assert sorted(report.removed) == sorted(names.values())
    # Meanwhile (the user was asked, the store was walked) a run registered its root.
    register_root(prefix, GcRoot.for_run(["exp.py"], [names["g/a"], names["g/b"]], name="late"))
    remove_garbage(store, report)
    assert sorted(report.spared) == sorted((names[n], SPARED_ROOT) for n in ("g/a", "g/b"))
    assert t.done_steps(prefix, names) == {"g/a", "g/b"}


class _CollectedWhilePlanning(StepRunner):
    """A runner whose first plan is followed, before the run holds its root, by a collection that
    keeps nothing: what the plan took for built is gone."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.collected: list[Any] = []

    def plan(self, *args: Any, **kwargs: Any) -> Any:
        plan = super().plan(*args, **kwargs)
        if not self.collected:
            self.collected.append(collect_garbage(StepStore(self.store.prefix), keep=set()))
        return plan


def test_a_gc_that_removes_while_a_run_plans_makes_the_run_plan_again(tmp_path, caplog):
    prefix = str(tmp_path / "store")
    names = t.built_diamond(prefix)
    g = t.diamond()
    reader = Step("g/reader", gated, GatedConfig((output_path_of(g["d"]),), str(tmp_path), str(tmp_path / "s")))
    runner = _CollectedWhilePlanning(prefix=prefix, client=t.InProcessClient())
    result = runner.run([reader])
    [report] = runner.collected
    assert sorted(report.removed) == sorted(names.values())  # it saw no root: the run had none yet
    assert "removed from" in caplog.text and "while this run planned: planning again" in caplog.text
    assert result.ok, result.steps
    assert {s.name: s.outcome.value for s in result.steps} == {
        "g/a": "ran", "g/b": "ran", "g/c": "ran", "g/d": "ran", "g/reader": "ran"}


def test_a_run_waits_to_plan_while_a_collection_removes(tmp_path, caplog):
    prefix = str(tmp_path / "store")
    names = t.built_diamond(prefix)
    result: dict[str, Any] = {}
    g = t.diamond()
    with collection_lock(prefix):
        run = threading.Thread(target=lambda: result.setdefault(
            "result", StepRunner(prefix=prefix, client=t.InProcessClient()).run([g["d"]])))
        run.start()
        deadline = time.monotonic() + 30
        while "waiting for a `marin gc`" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "waiting for a `marin gc`" in caplog.text
        assert run.is_alive() and "result" not in result
    run.join(30)
    assert result["result"].ok and {s.name for s in result["result"].steps} == {"g/a", "g/b", "g/c", "g/d"}
    assert t.done_steps(prefix, names) == set(names)


@pytest.mark.parametrize("where", ["local", "gs"])
def test_concurrent_root_merges_keep_every_update(tmp_path, request, where):
    prefix = str(tmp_path / "store") if where == "local" else request.getfixturevalue("strict_gcs_bucket") + "/store"
    runs, each = 6, 4
    everyone = threading.Barrier(runs)

    def merge(run: int) -> None:
        everyone.wait()  # all at once, as runs of `--only` parts of one experiment in CI
        for k in range(each):
            register_root(prefix, GcRoot.for_run(["exp.py"], [f"g/s{run}-{k:016x}"], name="ci-main"), merge=True)

    threads = [threading.Thread(target=merge, args=(r,)) for r in range(runs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    [root] = read_roots(prefix)
    assert sorted(root.outputs) == sorted(f"g/s{r}-{k:016x}" for r in range(runs) for k in range(each))


def test_a_damaged_success_record_stops_the_leftover_pass_for_its_folder(tmp_path):
    prefix = str(tmp_path / "store")
    output = "g/x-0123456789abcdef"
    record = StepRecord(fs.join(prefix, output))
    # A build written apart (its attempt folder holds it) and an older attempt's folder beside it.
    fs.atomic_write(fs.join(record.output_path, attempt_folder(2), "out.txt"), "the build")
    fs.atomic_write(fs.join(record.output_path, attempt_folder(1), "out.txt"), "a lost attempt")
    manifest = {"files": [{"path": "out.txt", "size": 9, "sha256": "0" * 64}], "total_bytes": 9}
    assert record.publish("g/x", "0123456789abcdef" * 4, manifest, attempt_folder=attempt_folder(2))
    register_root(prefix, GcRoot.for_run(["exp.py"], [output], name="keep-x"))
    store = StepStore(prefix)
    found = find_garbage(store, {output})
    assert [(left.path, left.kind) for left in found.leftovers] == [
        (fs.join(record.output_path, attempt_folder(1)), ATTEMPT_KIND)]

    Path(record.success).write_text('{"hash": "0123')  # cut off, or written over
    found = find_garbage(store, {output})
    assert found.leftovers == []  # which folder holds the build is unknown: none of them goes
    assert found.problems == [f"{output}: its leftovers are kept: {record.success} is damaged (not the record it "
                              "should be)"]
    result = CliRunner().invoke(cli, ["gc", "--prefix", prefix])
    assert result.exit_code == 1, result.output
    assert f"error: {found.problems[0]}" in result.output and "1 output left alone" in result.output
    assert Path(record.output_path, attempt_folder(2), "out.txt").read_text() == "the build"
    assert Path(record.output_path, attempt_folder(1), "out.txt").exists()


def test_a_killed_runs_temporary_root_keeps_nothing_and_is_a_leftover(tmp_path):
    prefix = str(tmp_path / "store")
    names = t.built_diamond(prefix)
    assert fs.listdir(fs.join(prefix, ".marin", "runs")) == []  # a run that ended took its root with it
    dead = fs.join(prefix, ".marin", "runs", "1-dead.json")
    fs.atomic_write(dead, json.dumps({"holder": "elsewhere:1:x", "expires_at": time.time() - 1,
                                      "outputs": [names["g/a"]]}))
    assert live_runs(prefix) == []
    report = collect_garbage(StepStore(prefix), keep=set())
    assert names["g/a"] in report.removed and [left.path for left in report.leftovers] == [dead]
    assert not fs.exists(dead)
    fs.atomic_write(dead, "{not json")
    with pytest.raises(ValueError, match="temporary GC root .*1-dead.json is unreadable"):
        collect_garbage(StepStore(prefix), keep=set())


def test_a_model_whose_manifest_is_damaged_or_missing_is_still_a_model(tmp_path):
    prefix = str(tmp_path / "store")
    for name, manifest in (("m/damaged-0123456789abcdef", "{not json"), ("m/unfinished-0123456789abcdef", None)):
        out = Path(prefix, name)
        (out / "checkpoints" / "step-1").mkdir(parents=True)
        (out / "checkpoints" / "step-1" / "_CHECKPOINT_METADATA").write_text("{}")
        (out / ".marin").mkdir()
        (out / ".marin" / ("manifest.json" if manifest else "status.json")).write_text(manifest or "{}")
    report = find_garbage(StepStore(prefix), keep=set())
    assert sorted((e.folder, e.model) for e in report.entries) == [
        ("m/damaged-0123456789abcdef", True), ("m/unfinished-0123456789abcdef", True)]
    register_root(prefix, GcRoot.for_run(["other.py"], [], name="other"))  # a root, so that gc collects
    result = CliRunner().invoke(cli, ["gc", "--prefix", prefix])
    assert result.exit_code == 2 and "gc would remove 2 models" in result.output, result.output
    assert Path(prefix, "m/damaged-0123456789abcdef/checkpoints").is_dir()
