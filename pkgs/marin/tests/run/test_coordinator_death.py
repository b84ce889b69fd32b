"""A ``marin run`` SIGKILLed mid-graph on gs:// (the strict emulator) and started again on another
"machine" (another process, another working folder): no finished step is built again, and the step
that was running continues from what it had committed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import steps_for_tests as t
from click.testing import CliRunner

from marin.cli.main import cli

pytestmark = pytest.mark.slow

GRAPH = textwrap.dedent("""
    import os

    import steps_for_tests as t
    from marin.execution.step import Step, output_path_of

    counter = os.environ["COUNTER"]
    first = t.node("coord/first", counter)
    slow = Step("coord/slow", t.resumable, t.ResumableConfig(seconds_per_unit=0.1, after=output_path_of(first),
                                                             counter_dir=counter))
    last = t.node("coord/last", counter, slow)
    steps = [last]
""")


def _calls(counter: Path) -> dict[str, int]:
    return dict(t.calls(str(counter)))


def _units_by_attempt(counter: Path) -> list[list[int]]:
    """The units of the slow step each attempt worked on, in order, one list per attempt (its
    process, as the counter recorded it; "resumable" is counted as an attempt starts)."""
    log = t.call_log(str(counter))
    prefix = "resumable.unit."
    return [[int(label[len(prefix):]) for label, p in log if label.startswith(prefix) and p == pid]
            for label, pid in log if label == "resumable"]


def test_a_coordinator_killed_mid_graph_is_replaced_by_another_that_repeats_nothing(tmp_path, strict_gcs_bucket,
                                                                                    subprocess_env, monkeypatch):
    machine_a, machine_b = tmp_path / "a", tmp_path / "b"
    for folder in (machine_a, machine_b):
        folder.mkdir()
        (folder / "graph.py").write_text(GRAPH)
    counter = tmp_path / "counter"
    counter.mkdir()
    prefix = strict_gcs_bucket + "/store"
    env = {**subprocess_env, "COUNTER": str(counter)}
    marin = [sys.executable, "-m", "marin.cli.main", "run", "graph.py", "--prefix", prefix]
    first = subprocess.Popen(marin, cwd=machine_a, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    while len(next(iter(_units_by_attempt(counter)), [])) < 5:  # the first attempt's units, once it started
        assert first.poll() is None, first.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the slow step never got going"
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.communicate()

    second = subprocess.run(marin, cwd=machine_b, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    calls = _calls(counter)
    assert calls["coord.first"] == 1 and calls["coord.last"] == 1, calls  # nothing finished is rebuilt
    assert calls["resumable"] == 2  # the killed attempt and the one that finished it
    # The replacement continued from the units the dead one committed: together the two attempts did
    # every unit, each attempt each unit once, and the replacement repeated at most the unit the dead
    # one was working on last (killed after that unit's work, before its commit; the step's process
    # can outlive its coordinator by a moment, so that is the last unit it started, not the last
    # one seen before the kill).
    killed, replacement = _units_by_attempt(counter)
    assert len(killed) >= 5 and killed == sorted(set(killed)), killed
    assert replacement == sorted(set(replacement)) and sorted(set(killed) | set(replacement)) == list(range(20))
    assert set(killed) & set(replacement) <= {killed[-1]}, (killed, replacement)
    assert "[ran] coord/slow" in second.stdout and "coord/first" not in [
        line.split()[1] for line in second.stdout.splitlines() if line.startswith("[ran]")]
    # Read back here (the CLI's own process boundary is not the point): on machine b, as the runs.
    monkeypatch.chdir(machine_b)
    shown = CliRunner().invoke(cli, ["show", "coord/slow", "--prefix", prefix, "--json"], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    status = json.loads(shown.stdout)
    assert status["state"] == "done" and status["attempts"] == 2
