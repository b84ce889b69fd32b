"""Steps whose outputs decide the next steps: planned, built, replayed from the cache, with -j 2,
raced by two runners, and killed mid-expansion."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest
import steps_for_tests as t

from marin.execution.plan.expansion import ExpansionFailed
from marin.execution.plan.model import Action, ReasonKind
from marin.execution.run.outcome import Outcome
from marin.execution.run.runner import StepRunner
from marin.execution.store.records import StepRecord

ITEMS = {"fan.root.item-0", "fan.root.item-1", "fan.root.item-2", "fan.root.next.item-0", "fan.root.next.item-1",
         "fan.root.next.item-2", "fan.root.next.item-3"}
TOTAL = {"items": 7, "total": 0 + 1 + 4 + 0 + 1 + 4 + 9}


def _runner(prefix: str, **kwargs) -> StepRunner:
    return StepRunner(prefix=prefix, poll_interval=0.02, **kwargs)


def _builds(counter: str) -> dict[str, int]:
    return {k: v for k, v in t.calls(counter).items() if not k.endswith(".slept")}


def _total(result) -> dict:
    return json.loads(open(result.by_name("fan/gather").output_path + "/total.json").read())


def test_an_expansion_is_planned_after_its_step_built_then_replayed_from_the_cache(tmp_path, counter):
    prefix = str(tmp_path / "store")
    g = t.fan_graph(counter)
    plan = _runner(prefix).plan([g["gather"]])
    by_name = {p.name: p for p in plan.steps}
    assert set(by_name) == {"fan/root", "fan/gather"}  # the items are not known yet
    assert [r.kind for r in by_name["fan/root"].reasons] == [ReasonKind.NEW, ReasonKind.EXPANDS]
    assert [plan.steps[pos].name for pos in plan.unexpanded()] == ["fan/root"]
    assert plan.to_json()["expands_after"] == ["fan/root"]

    result = _runner(prefix, max_parallel=2).run([g["gather"]])
    assert result.ok, [(s.name, s.error) for s in result.steps]
    assert _builds(counter) == {"fan": 1, "fan.leaf": 1, "gather": 1, **{label: 1 for label in ITEMS}}
    assert _total(result) == TOTAL
    assert {s.name for s in result.steps} >= {"fan/root/item-2", "fan/root/next", "fan/root/next/item-3"}

    # Built: the plan replays both expansions from the outputs; nothing runs, nothing is unknown.
    again = t.fan_graph(counter)
    replay = _runner(prefix).plan([again["gather"]])
    assert {p.action for p in replay.steps} == {Action.CACHED} and replay.unexpanded() == []
    assert len(replay.steps) == 2 + 7 + 1
    root = replay.position(again["root"])
    assert sorted(replay.steps[q].name for q in replay.expansions[root]) == [
        "fan/root/item-0", "fan/root/item-1", "fan/root/item-2", "fan/root/next"]
    rerun = _runner(prefix).run([again["gather"]])
    assert rerun.ok and rerun.count(Outcome.RAN) == 0 and len(rerun.steps) == 10
    assert _builds(counter)["fan"] == 1 and _builds(counter)["gather"] == 1


def test_an_expanded_step_is_the_same_step_whoever_expands_it(tmp_path, counter):
    prefix = str(tmp_path / "store")
    g = t.fan_graph(counter, width=2, depth=0)
    assert _runner(prefix).run([g["gather"]]).ok
    # An item named and configured as the fan's expansion makes it: it is cached.
    item = t.Step("fan/root/item-1", t.fan_item, t.FanItemConfig("fan.root.item-1", 1, 0.0, counter))
    assert [p.action for p in _runner(prefix).plan([item]).steps] == [Action.CACHED]


def test_dry_run_and_a_changed_expansion_rebuild_only_what_changed(tmp_path, counter):
    prefix = str(tmp_path / "store")
    dry = _runner(prefix, dry_run=True).run([t.fan_graph(counter)["gather"]])
    assert {s.outcome for s in dry.steps} == {Outcome.WOULD_RUN} and len(dry.steps) == 2
    assert _builds(counter) == {}
    assert _runner(prefix).run([t.fan_graph(counter, width=2, depth=0)["gather"]]).ok
    # One item more: the fan is rebuilt (its config changed), items 0 and 1 are the same steps.
    wider = _runner(prefix).run([t.fan_graph(counter, width=3, depth=0)["gather"]])
    assert wider.ok
    calls = _builds(counter)
    assert calls["fan.root.item-0"] == 1 and calls["fan.root.item-1"] == 1 and calls["fan.root.item-2"] == 1
    assert calls["fan.leaf"] == 2 and calls["gather"] == 2


def test_a_failing_expansion_fails_its_step_and_its_readers(tmp_path, counter):
    prefix = str(tmp_path / "store")
    g = t.fan_graph(counter, width=2, depth=0, broken=True)
    result = _runner(prefix).run([g["gather"]])
    assert not result.ok
    root = result.by_name("fan/root")
    assert root.outcome is Outcome.FAILED and "expanding its output" in root.error and "no such width" in root.error
    assert result.by_name("fan/gather").outcome is Outcome.UPSTREAM_FAILED
    # Built and found again: planning says so, naming the step.
    with pytest.raises(ExpansionFailed, match="fan/root: expanding its output .* failed: ValueError: no such width"):
        _runner(prefix).plan([g["gather"]])


RUNNER_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import steps_for_tests as t
    from marin.execution.step_runner import StepRunner

    if __name__ == "__main__":
        prefix, counter, sleep = sys.argv[1], sys.argv[2], float(sys.argv[3])
        g = t.fan_graph(counter, item_sleep=sleep)
        result = StepRunner(prefix=prefix, max_parallel=2, lease_ttl=5.0, poll_interval=0.05).run([g["gather"]])
        print(json.dumps({s.name: s.outcome.name for s in result.steps}))
        raise SystemExit(0 if result.ok else 1)
    """
)


def _script(tmp_path) -> str:
    path = tmp_path / "fan_runner.py"
    path.write_text(RUNNER_SCRIPT)
    return str(path)


def test_two_runners_racing_expand_the_same_way_and_build_each_step_once(tmp_path, counter, subprocess_env):
    prefix = str(tmp_path / "store")
    script = _script(tmp_path)
    procs = [subprocess.Popen([sys.executable, script, prefix, counter, "0.3"], env=subprocess_env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-3000:]
        outputs.append(json.loads(out.strip().splitlines()[-1]))
    assert _builds(counter) == {"fan": 1, "fan.leaf": 1, "gather": 1, **{label: 1 for label in ITEMS}}
    assert outputs[0].keys() == outputs[1].keys() and len(outputs[0]) == 10
    for name in outputs[0]:
        assert sorted(o[name] for o in outputs) in (["CACHED", "RAN"], ["CACHED", "CACHED"], ["RAN", "REUSED"]), name


def test_a_runner_killed_mid_expansion_is_finished_by_the_next_without_building_anything_twice(
        tmp_path, counter, subprocess_env):
    prefix = str(tmp_path / "store")
    proc = subprocess.Popen([sys.executable, _script(tmp_path), prefix, counter, "30"], env=subprocess_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        # The root fan was built and expanded: its items started (and sleep on their first call).
        while sum(1 for k in t.calls(counter) if k.endswith(".slept")) < 2:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the items never started"
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.communicate()
    g = t.fan_graph(counter, item_sleep=30.0)  # as the runner script made it (a float)
    assert StepRecord(_runner(str(tmp_path / "store")).plan([g["root"]]).steps[0].output_path).is_done()
    result = _runner(prefix, max_parallel=4, lease_ttl=5.0).run([g["gather"]])
    assert result.ok, [(s.name, s.error) for s in result.steps]
    assert _total(result) == TOTAL
    built = _builds(counter)
    assert built["fan"] == 1 and built["gather"] == 1 and built["fan.leaf"] == 1
    # The two items the killed runner started ran again (they never finished); every other step once.
    assert sorted(v for k, v in built.items() if k in ITEMS) == [1, 1, 1, 1, 1, 2, 2]


def test_marin_plan_says_what_it_knows_and_what_expands_later(tmp_path, counter):
    from click.testing import CliRunner

    from marin.cli.main import cli

    exp = tmp_path / "fan_exp.py"
    exp.write_text("import steps_for_tests as t\nsteps = [t.fan_graph()['gather']]\n")
    prefix = str(tmp_path / "store")
    before = CliRunner().invoke(cli, ["plan", str(exp), "--prefix", prefix], catch_exceptions=False)
    assert before.exit_code == 0, before.output
    assert "expands after fan/root: the steps its output decides are planned once it is built" in before.stdout
    assert "fan/root/item-0" not in before.stdout
    assert CliRunner().invoke(cli, ["run", str(exp), "--prefix", prefix], catch_exceptions=False).exit_code == 0
    after = CliRunner().invoke(cli, ["plan", str(exp), "--prefix", prefix], catch_exceptions=False)
    assert "expands after" not in after.stdout and "fan/root/next/item-3" in after.stdout
    status = CliRunner().invoke(cli, ["status", str(exp), "--prefix", prefix, "--all"], catch_exceptions=False)
    assert status.exit_code == 0 and status.stdout.count(" done ") == 10, status.stdout
