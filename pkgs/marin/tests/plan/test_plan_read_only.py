"""Planning never writes to the store: a plan only reads it, whatever state its done index is in
(the run keeps the index current)."""

from __future__ import annotations

import os

import pytest
import steps_for_tests as t
from click.testing import CliRunner

from marin.execution.plan.model import Action
from marin.execution.run.runner import Outcome, StepRunner
from marin.execution.store.done_index import index_folder, read_index
from rigging import filesystem as fs


def _snapshot(root: str) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``root`` (relative path → mtime_ns, size): a write anywhere,
    even one undone (a file made and deleted), changes it."""
    seen = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            st = os.stat(path)
            seen[os.path.relpath(path, root)] = (st.st_mtime_ns, st.st_size)
    if os.path.exists(root):
        seen["."] = (os.stat(root).st_mtime_ns, 0)
    return seen


def _runner(prefix: str) -> StepRunner:
    return StepRunner(prefix=prefix, max_parallel=2, client=t.InProcessClient(), poll_interval=0.01, config=None)


def _graph():
    return [t.diamond()["d"]]


def _built(prefix: str) -> None:
    assert _runner(prefix).run(_graph()).count(Outcome.RAN) == 4


def _plan_cli(prefix: str, tmp_path) -> None:
    from marin.cli.main import cli

    experiment = tmp_path / "exp_read_only.py"
    experiment.write_text("import steps_for_tests as t\nsteps = [t.diamond()['d']]\n")
    result = CliRunner().invoke(cli, ["plan", str(experiment), "--prefix", prefix], catch_exceptions=False)
    assert result.exit_code == 0, result.output


def _deleted_index(prefix: str) -> None:
    fs.rm_tree(index_folder(prefix))  # a store written before the index existed: every marker missing


def _deleted_output(prefix: str) -> None:
    plan = _runner(prefix).plan(_graph(), explain=False)
    fs.rm_tree(plan.steps[-1].output_path)  # its marker is stale


@pytest.mark.parametrize("state", ["empty", "built", "index missing", "output deleted by hand"])
@pytest.mark.parametrize("how", ["api", "cli"])
def test_a_plan_changes_no_file_under_the_prefix(tmp_path, state, how):
    prefix = str(tmp_path / "store")
    if state != "empty":
        _built(prefix)
    if state == "index missing":
        _deleted_index(prefix)
    elif state == "output deleted by hand":
        _deleted_output(prefix)
    before = _snapshot(prefix)
    if how == "api":
        _runner(prefix).plan(_graph(), note_env=True, estimate=True)
    else:
        _plan_cli(prefix, tmp_path)
    assert _snapshot(prefix) == before


def test_a_plan_reads_steps_missing_from_the_index_at_their_records_and_the_run_marks_them(tmp_path):
    prefix = str(tmp_path / "store")
    _built(prefix)
    _deleted_index(prefix)
    plan = _runner(prefix).plan(_graph())
    assert {p.action for p in plan.steps} == {Action.CACHED}
    assert read_index(prefix) == {}
    result = _runner(prefix).run(_graph())
    assert result.count(Outcome.CACHED) == 4
    assert sorted(read_index(prefix)) == sorted(p.output_name for p in plan.steps)


def test_a_stale_marker_is_not_done_and_the_run_replaces_it(tmp_path):
    prefix = str(tmp_path / "store")
    _built(prefix)
    _deleted_output(prefix)
    plan = _runner(prefix).plan(_graph(), explain=False)
    victim = plan.steps[-1]
    assert victim.action is Action.RUN
    assert victim.output_name in read_index(prefix)  # the plan left it: only a run writes
    result = _runner(prefix).run(_graph())
    assert result.count(Outcome.RAN) == 1 and result.count(Outcome.CACHED) == 3
    assert victim.output_name in read_index(prefix)
