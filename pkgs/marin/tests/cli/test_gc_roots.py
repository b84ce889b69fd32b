"""GC roots (``marin roots``), ``marin gc`` that keeps what any root reaches and asks before it
removes a model, and ``marin du``: on real stores (a copy of the session's trained tiny models,
with their Orbax checkpoints; diamonds built by ``marin run``; a ``gs://`` bucket on an emulator)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import steps_for_tests as t
from click.testing import CliRunner

from marin.cli.main import cli
from marin.cli.text import format_bytes
from marin.execution.store.gc import find_garbage
from marin.execution.store.layout import attempt_folder
from marin.execution.store.roots import GcRoot, read_roots, register_root, root_id
from marin.execution.store.step_record import StepRecord
from marin.execution.store.store import StepStore
from marin.execution.store.usage import build_size
from rigging import filesystem as fs
from rigging.tempdirs import FRAY_POOL, owned_prefix
from testsupport.namespaces import gone_place

DIAMOND = """
import steps_for_tests as t

g = t.diamond(**{overrides})
steps = [g["d"], g["e"]]
"""

MODELS = """
from testsupport.lm_graph import tiny_model

steps = [tiny_model(steps=20)]
"""


SPILL = """
import steps_for_tests as t
from marin.execution.core.step import Step

g = t.diamond()
steps = [g["d"], Step("g/spill", t.record, t.NodeConfig(label="spill"), ttl=1)]
"""


def _file(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def _diamond(folder: Path, name: str, overrides: str = "{}") -> str:
    return _file(folder, name, DIAMOND.replace("{overrides}", overrides))


def _marin(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def _forget(path: str) -> None:
    """Drop the module of the experiment file ``path`` imported by an earlier command of this process."""
    for name, module in list(sys.modules.items()):
        if getattr(module, "__file__", None) == path:
            del sys.modules[name]


def _done(prefix: str) -> set[str]:
    """The output names under ``prefix`` whose build is finished."""
    return {rel[:-len("/.marin/success.json")] for rel, _ in fs.walk_files(prefix)
            if rel.endswith("/.marin/success.json") and not rel.startswith(".marin/")}


def test_the_wrong_file_removes_nothing_a_root_keeps_and_a_model_goes_only_when_told(tmp_path, trained_prefix):
    from testsupport.lm_graph import copy_prefix

    prefix = str(copy_prefix(trained_prefix, tmp_path / "store"))
    models = _file(tmp_path, "models.py", MODELS)
    wrong = _diamond(tmp_path, "wrong.py")
    before = _done(prefix)
    longer = {o for o in before if o.startswith("checkpoints/tiny-")}
    assert len(longer) == 2, before  # the 20-step run and the 10-step run

    code, out = _marin("run", models, "--prefix", prefix)  # cached: it registers its root
    assert code == 0, out
    [root] = read_roots(prefix)
    assert root.id == root_id([models]) and root.targets == (models,) and root.host
    kept = set(root.outputs)
    [model] = kept & longer
    [other_model] = longer - kept
    assert build_size(StepRecord(fs.join(prefix, model))).model  # an Orbax checkpoint inside

    # The wrong file: everything the root keeps stays; the other model is no root's, so nothing at all goes.
    code, out = _marin("gc", wrong, "--prefix", prefix)
    assert code == 2, out
    assert f"would remove {other_model} (" in out and ", a model): no root reaches it" in out
    assert f"gc would remove 1 model ({other_model}); nothing was removed" in out
    assert "--yes" in out
    assert _done(prefix) == before

    code, out = _marin("gc", wrong, "--prefix", prefix, "--dry-run")
    assert code == 0, out
    assert "(dry run); kept" in out and "by 1 root and the given files" in out
    assert _done(prefix) == before
    assert model not in out  # the root's model is never among what would go

    code, out = _marin("gc", wrong, "--prefix", prefix, "--yes")
    assert code == 0, out
    left = _done(prefix)
    assert kept <= left and other_model not in left
    assert left == kept, "everything no root reaches went, nothing else"
    code, out = _marin("roots", "--prefix", prefix)
    assert code == 0 and root.id in out and models in out, out
    size = sum(build_size(StepRecord(fs.join(prefix, o))).bytes for o in kept)  # type: ignore[union-attr]
    assert format_bytes(size) in out and f"{len(kept)}/{len(kept)}" in out


def test_roots_replace_drop_and_sum(tmp_path):
    prefix = str(tmp_path / "store")
    first = _diamond(tmp_path, "first.py")
    second = _diamond(tmp_path, "second.py", '{"a": {"value": 9}, "e": {"value": 2}}')  # shares nothing
    code, out = _marin("gc", "--prefix", prefix, "--dry-run")
    assert code == 2 and "no GC roots under" in out and "nothing was removed" in out, out
    for exp in (first, second):
        code, out = _marin("run", exp, "--prefix", prefix)
        assert code == 0, out
    roots = {r.id: r for r in read_roots(prefix)}
    assert set(roots) == {root_id([first]), root_id([second])}
    built = _done(prefix)
    assert len(built) == 10

    code, out = _marin("gc", "--prefix", prefix)
    assert code == 0 and "removed 0 outputs" in out and "kept 10 reachable (by 2 roots)" in out, out

    # A run of part of the graph (--only) keeps what the root kept.
    assert _marin("run", first, "--only", "g/a", "--prefix", prefix)[0] == 0
    assert {r.id: r for r in read_roots(prefix)}[root_id([first])].outputs == roots[root_id([first])].outputs
    # The first experiment edited and run again: its root now keeps the new outputs, not the old.
    registered = roots[root_id([first])].registered_at
    _diamond(tmp_path, "first.py", '{"a": {"value": 5}}')
    _forget(first)
    assert _marin("run", first, "--prefix", prefix)[0] == 0
    again = {r.id: r for r in read_roots(prefix)}[root_id([first])]
    assert again.registered_at == registered and again.updated_at > registered  # type: ignore[operator]
    stale = built - set(again.outputs) - set(roots[root_id([second])].outputs)
    assert {o.rpartition("-")[0] for o in stale} == {"g/a", "g/b", "g/c", "g/d"}
    code, out = _marin("gc", "--prefix", prefix, "--dry-run")
    assert code == 0 and "would remove 4 outputs" in out, out
    for o in stale:
        assert f"would remove {o} (" in out and os.path.isdir(fs.join(prefix, o))

    code, out = _marin("du", "--prefix", prefix)
    assert code == 0, out
    sizes = {o: build_size(StepRecord(fs.join(prefix, o))) for o in _done(prefix)}
    bytes_of = {o: s.bytes for o, s in sizes.items() if s is not None}
    assert len(bytes_of) == 14
    rows = [line.split() for line in out.splitlines()]
    assert [format_bytes(sum(bytes_of.values())), "14", "g/"] == [" ".join(rows[1][:2]), *rows[1][2:]]
    assert f"total: {format_bytes(sum(bytes_of.values()))} in 14 builds" in out
    for r in read_roots(prefix):
        kept = format_bytes(sum(bytes_of[o] for o in r.outputs)).split()
        assert [*kept, "5", r.id] in [row[:4] for row in rows], out
    assert f"reached by no root: {format_bytes(sum(bytes_of[o] for o in stale))} in 4 builds" in out

    code, out = _marin("roots", "rm", "nope", "--prefix", prefix)
    assert code == 2 and "no GC root nope under" in out and "nothing removed" in out, out
    code, out = _marin("roots", "--prefix", prefix, "rm", root_id([second]))  # --prefix before or after rm
    assert code == 0 and f"removed root {root_id([second])}" in out, out
    code, out = _marin("gc", "--prefix", prefix)
    assert code == 0 and "removed 9 outputs" in out, out  # the 4 stale and the second's 5
    assert _done(prefix) == set(again.outputs)


def test_gc_removes_expired_outputs_and_what_killed_processes_left(tmp_path, monkeypatch):
    prefix = str(tmp_path / "store")
    exp = _file(tmp_path, "exp.py", SPILL)
    assert _marin("run", exp, "--prefix", prefix)[0] == 0
    store = StepStore(prefix)
    [root] = read_roots(prefix)
    e = next(o for o in root.outputs if o.startswith("g/spill-"))
    d = next(o for o in root.outputs if o.startswith("g/d-"))
    success = StepRecord(store.output_path(e)).read_success()
    assert success is not None and success.ttl_s == 1.0
    time.sleep(max(0.0, success.expires_at() - time.time()) + 0.1)  # type: ignore[operator]
    # An attempt that lost its lease left its folder in d; a killed worker pool left its temporary folder.
    stray = fs.join(store.output_path(d), attempt_folder(7))
    fs.atomic_write(fs.join(stray, "out.txt"), "x" * 100)
    tmp = tmp_path / "tmp"
    dead = tmp / f"{owned_prefix(FRAY_POOL, gone_place())}abc"
    dead.mkdir(parents=True)
    (dead / "worker.log").write_text("y" * 50)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr("tempfile.tempdir", None)

    report = find_garbage(store, set(root.outputs), machine=True)
    assert [(g.folder, g.why) for g in report.entries] == [(e, "its ttl has passed")]
    assert sorted((left.path, left.bytes) for left in report.leftovers) == sorted([(stray, 100), (str(dead), 50)])
    code, out = _marin("gc", "--prefix", prefix)
    assert code == 0, out
    assert f"removing {e} (" in out and "removed 1 output and 2 leftovers" in out
    assert not os.path.exists(store.output_path(e)) and not os.path.exists(stray) and not dead.exists()
    assert StepRecord(store.output_path(d)).is_done()
    # The expired step is built again when next needed.
    code, out = _marin("run", exp, "--prefix", prefix)
    assert code == 0 and StepRecord(store.output_path(e)).is_done(), out


def test_a_root_registered_on_gcs_protects_its_outputs_from_a_gc_in_another_process(tmp_path, gcs_bucket,
                                                                                  subprocess_env):
    prefix = f"{gcs_bucket}/store"
    exp = _diamond(tmp_path, "exp.py")
    other = _diamond(tmp_path, "other.py", '{"e": {"value": 3}}')
    code, out = _marin("run", exp, "--prefix", prefix)
    assert code == 0, out
    [root] = read_roots(prefix)
    assert fs.exists(f"{prefix}/.marin/roots/{root.id}.json")
    marin = os.path.join(t.WORKSPACE, ".venv", "bin", "marin")
    proc = subprocess.run([marin, "gc", other, "--prefix", prefix], env=subprocess_env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "removed 0 outputs" in proc.stdout and "kept 5 reachable (by 1 root and the given files)" in proc.stdout
    assert all(StepRecord(fs.join(prefix, o)).is_done() for o in root.outputs)


def test_root_records_refuse_bad_names_and_damage(tmp_path):
    prefix = str(tmp_path / "store")
    with pytest.raises(ValueError, match=r"^root name '\.\./x' must be"):
        GcRoot.for_run(["x.py"], [], name="../x")
    code, out = _marin("run", "x.py", "--root", "a/b", "--prefix", prefix)
    assert code == 2 and "--root: root name 'a/b' must be" in out, out
    register_root(prefix, GcRoot.for_run(["x.py"], ["g/a-0123456789abcdef"], name="ci-main"))
    assert [r.id for r in read_roots(prefix)] == ["ci-main"]
    fs.atomic_write(fs.join(prefix, ".marin/roots/broken.json"), "{not json")
    code, out = _marin("gc", "--prefix", prefix)
    assert code == 2 and "GC root" in out and "broken.json is unreadable" in out, out


def test_a_store_whose_roots_cannot_be_written_still_runs_and_says_so(tmp_path):
    prefix = tmp_path / "store"
    exp = _diamond(tmp_path, "exp.py")
    assert _marin("run", exp, "--prefix", str(prefix))[0] == 0
    roots = prefix / ".marin" / "roots"
    shutil.rmtree(roots)
    roots.write_text("")  # a file where the folder should be: every write under it fails, as in a read-only store
    code, out = _marin("run", exp, "--prefix", str(prefix))
    assert code == 0, out
    assert f"warning: GC root {root_id([exp])} not registered under {prefix} (NotADirectoryError" in out
    assert read_roots(str(prefix)) == []


def test_without_prefix_the_verbs_use_the_default_store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MARIN_PREFIX", raising=False)
    exp = _diamond(tmp_path, "exp.py")
    assert _marin("run", exp)[0] == 0
    default = str(tmp_path / ".marin" / "store")
    [root] = read_roots(default)
    code, out = _marin("roots")
    assert code == 0 and root.id in out and f"1 root under {default}" in out, out
    code, out = _marin("du")
    assert code == 0 and "total:" in out and "in 5 builds" in out, out
    code, out = _marin("gc", "--dry-run")
    assert code == 0 and "would remove 0 outputs" in out and "kept 5 reachable (by 1 root)" in out, out
