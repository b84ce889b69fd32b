"""Local admission: running steps never ask for more CPUs together than the machine has, and a step
that needs more than the machine has at all is refused when planning, before anything runs."""

from __future__ import annotations

import json
import os
import textwrap
import time

import pytest
from click.testing import CliRunner

from iris.admission import MachineCapacity, ResourcesTooLarge
from iris.cluster import ResourceConfig
from marin.cli.main import cli
from marin.execution.core.step import Step
from marin.execution.run.outcome import Outcome
from marin.execution.run.runner import StepRunner
from rigging import filesystem as fs
from rigging.config.discovery import Backend

HOLD_S = 1.5


def hold_cpus(config: dict, output_path: str) -> None:
    """Record when the step started and ended, holding its CPUs for ``HOLD_S`` in between."""
    start = time.time()
    time.sleep(HOLD_S)
    fs.atomic_write(fs.join(output_path, "times.json"), json.dumps({"start": start, "end": time.time()}))


def _two_greedy_steps(tag: str) -> list[Step]:
    return [Step(name=f"admit/{tag}-{i}", fn=hold_cpus, config={"i": i}, resources=ResourceConfig(cpus=2))
            for i in range(2)]


def _runner(prefix: str, cpus: float) -> StepRunner:
    return StepRunner(prefix=prefix, max_parallel=4, strict_env=False, backend=Backend.LOCAL, poll_interval=0.02,
                      capacity=MachineCapacity(cpus=cpus, memory=8 * 2**30))


def _intervals(result) -> list[tuple[float, float]]:
    times = [json.loads(fs.read_text(fs.join(s.output_path, "times.json"))) for s in result.steps]
    return sorted((t["start"], t["end"]) for t in times)


def test_two_steps_that_each_want_the_whole_machine_run_one_after_the_other(tmp_path):
    result = _runner(str(tmp_path / "store"), cpus=2).run(_two_greedy_steps("two-cpus"))
    assert result.ok and [s.outcome for s in result.steps] == [Outcome.RAN, Outcome.RAN]
    (s1, e1), (s2, e2) = _intervals(result)
    assert e1 <= s2, f"steps overlapped: {e1 - s2:.2f}s"


def test_with_room_for_both_they_overlap(tmp_path):
    # The control: the same steps on a 4-CPU capacity do run at once, so the test above can fail.
    result = _runner(str(tmp_path / "store"), cpus=4).run(_two_greedy_steps("four-cpus"))
    assert result.ok
    (s1, e1), (s2, e2) = _intervals(result)
    assert s2 < e1


def test_a_step_wanting_more_than_the_machine_fails_at_plan_time(tmp_path):
    first = Step(name="admit/small", fn=hold_cpus, config={"i": 0})
    huge = Step(name="admit/huge", fn=hold_cpus, config={"upstream": first}, resources=ResourceConfig(cpus=64))
    runner = _runner(str(tmp_path / "store"), cpus=2)
    started = time.monotonic()
    with pytest.raises(ResourcesTooLarge) as info:
        runner.run([huge])
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("step admit/huge: ") and "cpus: 64 > 2" in message
    assert time.monotonic() - started < HOLD_S  # refused before anything ran
    assert not (tmp_path / "store" / "admit").exists()  # not even the small upstream step ran


EXPERIMENT = '''
from iris.cluster import ResourceConfig
from marin.execution.step import Step


def write_nothing(config, output_path):
    pass


steps = [Step(name="admit/cli-huge", fn=write_nothing, config={"n": 3}, resources=ResourceConfig(cpus=100_000))]
'''


def test_the_cli_reports_it_as_a_user_error(tmp_path):
    path = tmp_path / "exp_huge.py"
    path.write_text(textwrap.dedent(EXPERIMENT))
    prefix = tmp_path / "store"
    result = CliRunner().invoke(cli, ["run", str(path), "--prefix", str(prefix), "--backend", "local"],
                                catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "step admit/cli-huge: the job needs more than this machine has (cpus: 100000 >" in result.stderr
    assert "Traceback" not in result.output
    assert not any(name.startswith("admit") for name in (os.listdir(prefix) if prefix.exists() else []))
