"""Estimates from earlier builds: scaling by the config's work, critical paths, accelerator-hours."""

from __future__ import annotations

import pytest
from steps_for_tests import timed_step

from iris.cluster import ResourceConfig
from marin.execution.plan.estimate import estimate_plan, format_duration, parse_duration, schedule
from marin.execution.run.runner import StepRunner
from marin.execution.store.records import StepRecord


def _runner(prefix: str, **kwargs) -> StepRunner:
    # A memory:// prefix: every step runs in this process.
    return StepRunner(prefix=prefix, max_parallel=kwargs.pop("max_parallel", 1), strict_env=False, **kwargs)


def test_builds_at_100_and_200_steps_predict_400_within_20_percent(memory_prefix):
    runner = _runner(memory_prefix)
    # A step of its own first: the first step a process runs pays one-time costs inside its duration
    # (half a second measured, with imports), which as the 100-step build's would flatten the fit
    # (this test failed whenever it was the first of its xdist worker to run a step).
    assert runner.run([timed_step("warm/up", num_train_steps=0, startup=0.0)]).ok
    # Builds of 0.8 s and 1.1 s, then 1.7 s: a start-up large enough that the plain ratio (2.2 s) is
    # far off, and every margin of the assertions wider than a loaded machine's jitter.
    for steps in (100, 200):
        assert runner.run([timed_step("train/x", num_train_steps=steps, seconds_per_step=0.003,
                                      startup=0.5)]).ok
    target = timed_step("train/x", num_train_steps=400, seconds_per_step=0.003, startup=0.5)
    estimate = estimate_plan(runner.plan([target]), max_parallel=1)
    (only,) = estimate.steps.values()
    assert "fitted over num_train_steps" in only.basis and "2 earlier build(s)" in only.basis
    built = runner.run([target]).by_name("train/x").output_path
    actual = StepRecord(built).read_json(StepRecord(built).provenance)["duration_s"]
    assert only.seconds == pytest.approx(actual, rel=0.2), (only.seconds, actual)
    # The plain ratio would say twice the 200-step build; the fit knows the start-up is paid once.
    at_200 = next(prov.duration_s for _path, prov in runner.store.earlier_builds("train/x")
                  if '"200"' in (prov.config_flat or {})["num_train_steps"])
    assert only.seconds < 0.9 * 2 * at_200


def test_one_earlier_build_scales_by_the_ratio_of_the_work(memory_prefix):
    runner = _runner(memory_prefix)
    assert runner.run([timed_step("t/one", num_train_steps=10, seconds_per_step=0.02)]).ok
    built = runner.store.earlier_builds("t/one")[0][1].duration_s
    estimate = estimate_plan(runner.plan([timed_step("t/one", num_train_steps=30, seconds_per_step=0.02)]), 1)
    (only,) = estimate.steps.values()
    assert only.seconds == pytest.approx(3 * built)
    assert "scaled by num_train_steps" in only.basis


def test_a_step_never_built_has_no_estimate_and_is_named(memory_prefix):
    runner = _runner(memory_prefix)
    estimate = estimate_plan(runner.plan([timed_step("t/new", num_train_steps=3)]), 1)
    (only,) = estimate.steps.values()
    assert only.seconds is None and only.basis.startswith("no estimate")
    assert estimate.to_json()["no_estimate"] == ["t/new"]
    assert format_duration(only.seconds) == "no estimate"


def test_nearest_config_wins_over_farther_ones(memory_prefix):
    runner = _runner(memory_prefix)
    assert runner.run([timed_step("t/n", seconds_per_step=0.3, payload="a")]).ok
    assert runner.run([timed_step("t/n", seconds_per_step=0.01, payload="b", startup=0.001)]).ok
    # Differs from the first in one field (payload), from the second in three.
    estimate = estimate_plan(runner.plan([timed_step("t/n", seconds_per_step=0.3, payload="c")]), 1)
    (only,) = estimate.steps.values()
    assert only.seconds > 0.25 and "1 field(s) differ" in only.basis


def _diamond(version: str):
    a = timed_step("d/a", version=version, seconds_per_step=0.05)
    b = timed_step("d/b", a, version=version, seconds_per_step=0.4)
    c = timed_step("d/c", a, version=version, seconds_per_step=0.15)
    d = timed_step("d/d", b, c, version=version, seconds_per_step=0.05)
    return d


def test_critical_path_of_a_diamond_and_wall_time_under_parallelism(memory_prefix):
    runner = _runner(memory_prefix)
    assert runner.run([_diamond("v1")]).ok
    took = {name: runner.store.earlier_builds(name)[0][1].duration_s for name in ("d/a", "d/b", "d/c", "d/d")}
    # A version bump everywhere: every step runs again, each estimated from its v1 build.
    plan = runner.plan([_diamond("v2")])
    two = estimate_plan(plan, max_parallel=2)
    assert [two.names[p] for p in two.critical_path] == ["d/a", "d/b", "d/d"]
    assert two.critical_path_s == pytest.approx(took["d/a"] + took["d/b"] + took["d/d"])
    assert two.total_s == pytest.approx(sum(took.values()))
    assert two.wall_s == pytest.approx(two.critical_path_s)  # c runs beside b
    one = estimate_plan(plan, max_parallel=1)
    assert one.wall_s == pytest.approx(one.total_s)
    assert [e.name for e in two.dominating(1)] == ["d/b"]
    assert two.to_json()["critical_path"] == ["d/a", "d/b", "d/d"]


def test_accelerator_hours_by_type(memory_prefix):
    runner = _runner(memory_prefix)
    assert runner.run([timed_step("acc/t", seconds_per_step=0.05)]).ok
    assert runner.run([timed_step("acc/g", seconds_per_step=0.05)]).ok
    tpu = timed_step("acc/t", version="v2", seconds_per_step=0.05, resources=ResourceConfig.with_tpu("v4-32"))
    gpu = timed_step("acc/g", version="v2", seconds_per_step=0.05,
                     resources=ResourceConfig.with_gpu("H100", count=8, hosts=2))
    estimate = estimate_plan(runner.plan([tpu, gpu]), max_parallel=2)
    by_name = {e.name: e for e in estimate.steps.values()}
    assert by_name["acc/t"].resource == "TPU v4-32"
    assert estimate.accelerator_hours["TPU v4-32"] == pytest.approx(by_name["acc/t"].seconds / 3600)
    # 16 GPUs held for the step's duration.
    assert estimate.accelerator_hours["GPU H100"] == pytest.approx(16 * by_name["acc/g"].seconds / 3600)


def test_schedule_counts_running_steps_and_slots():
    deps = {0: [], 1: [0], 2: [0], 3: [1, 2]}
    durations = {0: 1.0, 1: 5.0, 2: 2.0, 3: 1.0}
    assert schedule(durations, deps, 1) == 9.0
    assert schedule(durations, deps, 2) == 7.0
    # Step 0 is running with 0.5 s left: the rest follows it.
    assert schedule({1: 5.0, 2: 2.0, 3: 1.0}, deps, 2, running={0: 0.5}) == 6.5
    with pytest.raises(ValueError, match="max_parallel must be >= 1, got 0"):
        schedule(durations, deps, 0)


@pytest.mark.parametrize(("text", "seconds"), [("2h", 7200.0), ("1h30m", 5400.0), ("90m", 5400.0),
                                               ("45s", 45.0), ("1.5h", 5400.0), ("600", 600.0), ("1d", 86400.0)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2x", "h", "-5", "0", "2h junk"])
def test_parse_duration_names_bad_text(text):
    with pytest.raises(ValueError, match=repr(text).replace("(", r"\(")):
        parse_duration(text)


def test_format_duration():
    assert format_duration(12.34) == "12.3s"
    assert format_duration(245) == "4m 05s"
    assert format_duration(3 * 3600 + 600) == "3h 10m"


def test_budget_refuses_a_plan_whose_estimate_exceeds_it_naming_the_dominating_step(memory_prefix):
    from marin.execution.plan.estimate import OverBudget

    runner = _runner(memory_prefix, max_parallel=2)
    assert runner.run([_diamond("v1")]).ok
    tight = _runner(memory_prefix, max_parallel=2, budget_s=0.3)
    with pytest.raises(OverBudget, match=r"exceeds the budget of 0\.3s; most of it: d/b \(") as info:
        tight.run([_diamond("v2")])
    assert "with -j 2" in str(info.value)
    # Nothing ran: every v2 step is still to build.
    assert [p.action.value for p in runner.plan([_diamond("v2")]).steps] == ["run"] * 4
    roomy = _runner(memory_prefix, max_parallel=2, budget_s=60)
    assert roomy.run([_diamond("v2")]).ok


def test_accelerator_hour_budget_names_the_accelerator_steps(memory_prefix):
    from marin.execution.plan.estimate import OverBudget

    assert _runner(memory_prefix).run([timed_step("acc/t", seconds_per_step=0.05)]).ok
    tpu = timed_step("acc/t", version="v2", seconds_per_step=0.05, resources=ResourceConfig.with_tpu("v4-32"))
    with pytest.raises(OverBudget, match=r"accelerator-hours \(TPU v4-32 0\.00 h\), over the budget of 1e-06; "
                                         r"most of it: acc/t \(0\.00 h TPU v4-32\)"):
        _runner(memory_prefix, budget_accelerator_hours=1e-6).run([tpu])
