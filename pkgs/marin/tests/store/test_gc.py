"""``marin gc``: removes outputs the experiments no longer reach, never a live-leased one."""

from __future__ import annotations

import os
import textwrap

import steps_for_tests as t
from click.testing import CliRunner

from marin.cli.main import cli
from marin.execution.run.runner import StepRunner
from marin.execution.store.gc import collect_garbage, find_outputs
from marin.execution.store.records import StepRecord
from marin.execution.store.store import StepStore
from rigging.lease import Lease

EXP = """
import steps_for_tests as t

g = t.diamond(**{overrides})
steps = [g["d"], g["e"]]
"""


def _exp(tmp_path, name: str, overrides: str = "{}") -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(EXP.replace("{overrides}", overrides)))
    return str(path)


def _build(prefix: str, **overrides) -> dict[str, str]:
    g = t.diamond(**overrides)
    result = StepRunner(prefix=prefix, max_parallel=2, client=t.InProcessClient()).run([g["d"], g["e"]])
    assert result.ok
    return {s.name: s.output_path for s in result.steps}


def test_gc_removes_only_unreachable_outputs(tmp_path):
    prefix = str(tmp_path / "store")
    old = _build(prefix, b={"value": 1})
    new = _build(prefix)
    stale = {old["g/b"], old["g/d"]}
    assert stale.isdisjoint(new.values())
    exp = _exp(tmp_path, "gc_exp")
    runner = CliRunner()

    dry = runner.invoke(cli, ["gc", exp, "--prefix", prefix, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "would remove 2 outputs" in dry.stdout and "(dry run)" in dry.stdout
    for path in stale:
        assert os.path.relpath(path, prefix) in dry.stdout
        assert os.path.isdir(path)  # a dry run removes nothing

    real = runner.invoke(cli, ["gc", exp, "--prefix", prefix])
    assert real.exit_code == 0, real.output
    assert "removed 2 outputs" in real.stdout and "kept 5 reachable" in real.stdout
    for path in stale:
        assert not os.path.exists(path)
    for path in new.values():
        assert StepRecord(path).is_done()
    again = runner.invoke(cli, ["gc", exp, "--prefix", prefix])
    assert "removed 0 outputs" in again.stdout


def test_gc_never_removes_an_output_held_by_a_live_lease(tmp_path):
    prefix = str(tmp_path / "store")
    old = _build(prefix, e={"value": 1})
    _build(prefix)
    busy = StepRecord(old["g/e"])
    assert Lease.acquire(busy.meta, ttl=300, holder="otherhost:1:busy") is not None
    report = collect_garbage(StepStore(prefix), keep=set(), dry_run=False)
    assert os.path.relpath(old["g/e"], prefix) in report.kept_live
    assert os.path.isdir(old["g/e"])
    assert len(report.removed) == 5 and report.freed_bytes > 0
    result = CliRunner().invoke(cli, ["gc", _exp(tmp_path, "gc_live"), "--prefix", prefix])
    assert "held by a live lease" in result.stdout


def test_gc_does_not_follow_a_symlink_out_of_the_prefix(tmp_path):
    prefix = tmp_path / "store"
    outside = tmp_path / "precious"
    (outside / ".marin").mkdir(parents=True)
    (outside / "data.txt").write_text("keep me")
    prefix.mkdir()
    (prefix / "linked-0123456789abcdef").symlink_to(outside)
    collect_garbage(StepStore(str(prefix)), keep=set())
    assert (outside / "data.txt").read_text() == "keep me"


def test_find_outputs_sizes(tmp_path):
    prefix = str(tmp_path / "store")
    paths = _build(prefix)
    sizes = find_outputs(StepStore(prefix))
    assert set(sizes) == {os.path.relpath(p, prefix) for p in paths.values()}
    assert all(size > 0 for size in sizes.values())
