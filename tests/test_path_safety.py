"""Path safety: step names, ``--prefix`` and ``marin gc`` never write or delete outside the prefix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from marin.execution.core.errors import InvalidStep
from marin.execution.core.step import Step, validate_step_name
from marin.execution.store.gc import collect_garbage, find_outputs
from marin.execution.store.store import StepStore

HOSTILE_NAMES = ["../x", "/abs", "a/../../b", "a/..", "..", ".", "", "a//b", "a/./b", "a\\..\\b", "a\\b",
                 "nul\x00byte", "new\nline", "a/", "/", ".hidden", "-flag", "~/home", "a/../b", "tab\there"]


def probe_fn(config, output_path):
    """Never run."""


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_step_names_are_refused(name):
    with pytest.raises(InvalidStep) as info:
        Step(name, probe_fn)
    assert repr(name) in str(info.value)


@settings(max_examples=400, deadline=None, database=None)
@given(name=st.text(max_size=30))
def test_every_accepted_name_stays_inside_the_prefix(name):
    try:
        validate_step_name(name)
    except InvalidStep:
        return
    prefix = "/srv/prefix"
    out = StepStore(prefix).output_path(f"{name}-0123456789abcdef")
    assert os.path.normpath(out).startswith(prefix + "/"), out
    assert os.path.normpath(out) == out  # nothing to resolve: no '..', '.', '//'
    assert "\\" not in name and "\x00" not in name


@pytest.mark.parametrize("prefix", ["a/../../b", "../up", "./rel", "x/./y/", "/abs/path/"])
def test_prefixes_are_made_absolute_once_and_outputs_stay_below(tmp_path, monkeypatch, prefix):
    monkeypatch.chdir(tmp_path)
    store = StepStore(prefix)
    assert os.path.isabs(store.prefix) and os.path.normpath(store.prefix) == store.prefix
    out = store.output_path("a/b-0123456789abcdef")
    assert out.startswith(store.prefix + "/")


def test_an_empty_prefix_is_refused():
    with pytest.raises(ValueError, match="prefix"):
        StepStore("")


def test_output_path_sub_paths_cannot_climb():
    step = Step("a", probe_fn)
    from marin.execution.core.placeholders import output_path_of

    for bad in ("../x", "/abs", "a/../../b"):
        with pytest.raises(InvalidStep):
            output_path_of(step, bad)


def _output(root: Path, rel: str, payload: str = "data") -> Path:
    folder = root / rel
    (folder / ".marin").mkdir(parents=True)
    (folder / ".marin" / "success.json").write_text("{}")
    (folder / "file.txt").write_text(payload)
    return folder


def test_gc_removes_a_link_inside_an_output_never_its_target(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    (outside / "dir").mkdir()
    (outside / "dir" / "also.txt").write_text("keep me too")
    prefix = tmp_path / "prefix"
    folder = _output(prefix, "old/step-0123456789abcdef")
    os.symlink(outside / "precious.txt", folder / "link-to-file")
    os.symlink(outside / "dir", folder / "link-to-dir")
    report = collect_garbage(StepStore(str(prefix)), keep=set())
    assert report.removed == ["old/step-0123456789abcdef"]
    assert not folder.exists()
    assert (outside / "precious.txt").read_text() == "keep me"
    assert (outside / "dir" / "also.txt").read_text() == "keep me too"


def test_gc_never_deletes_through_an_output_folder_that_is_a_symlink(tmp_path):
    outside = tmp_path / "outside"
    target = _output(outside, "victim-0123456789abcdef")
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    os.symlink(target, prefix / "victim-0123456789abcdef")
    (prefix / "sub").symlink_to(outside)  # a whole folder of the prefix pointing outside
    store = StepStore(str(prefix))
    report = collect_garbage(store, keep=set())
    assert (target / "file.txt").read_text() == "data"
    assert (target / ".marin" / "success.json").exists()
    for removed in report.removed:
        assert os.path.realpath(store.output_path(removed)).startswith(os.path.realpath(prefix))


def test_gc_with_a_prefix_reached_through_a_symlink_removes_only_inside(tmp_path):
    real = tmp_path / "real"
    _output(real, "a-0123456789abcdef")
    kept = _output(real, "b-0123456789abcdef")
    link = tmp_path / "link"
    link.symlink_to(real)
    report = collect_garbage(StepStore(str(link)), keep={"b-0123456789abcdef"})
    assert report.removed == ["a-0123456789abcdef"]
    assert kept.exists() and not (real / "a-0123456789abcdef").exists()


@settings(max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(st.sampled_from(["a", "b", "..", "x/..", "c/d", "e.f", "-g", "h i"]), min_size=1, max_size=4))
def test_gc_only_ever_removes_folders_it_found_under_the_prefix(tmp_path, names):
    import tempfile

    with tempfile.TemporaryDirectory(dir=tmp_path) as tmp:
        root = Path(tmp)
        outside = _output(root / "outside", "o-0123456789abcdef")
        prefix = root / "prefix"
        made = set()
        for i, name in enumerate(names):
            rel = f"{name}-{i:016d}"
            path = os.path.normpath(prefix / rel)
            if not path.startswith(str(prefix) + os.sep):
                continue  # a name that climbs is never a step's (Step refuses it): nothing to make
            _output(Path(path).parent, Path(path).name)
            made.add(os.path.relpath(path, prefix))
        store = StepStore(str(prefix))
        assert set(find_outputs(store)) == made
        collect_garbage(store, keep=set())
        assert (outside / "file.txt").exists()
        assert not any((prefix / m).exists() for m in made)


def test_marin_gc_cli_with_a_hostile_prefix_touches_nothing_outside(tmp_path, monkeypatch):
    from marin.cli.main import cli

    outside = _output(tmp_path / "outside", "x-0123456789abcdef")
    experiment = tmp_path / "exp_gc.py"
    experiment.write_text("from marin.experiment.data import bundled_corpus\nsteps = [bundled_corpus('g/raw', 3)]\n")
    work = tmp_path / "work" / "deep"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    result = CliRunner().invoke(cli, ["gc", str(experiment), "--prefix", "../../prefix/../prefix2"])
    assert result.exit_code == 0, result.output
    assert (outside / "file.txt").exists()
    assert "removed 0 outputs" in result.output


def test_a_step_output_folder_that_is_a_symlink_out_of_the_prefix_is_refused(tmp_path):
    from marin.cli.main import cli

    outside = tmp_path / "outside"
    outside.mkdir()
    experiment = tmp_path / "exp_link.py"
    experiment.write_text("from marin.experiment.data import bundled_corpus\n"
                          "steps = [bundled_corpus('g/raw', 3, num_shards=1)]\n")
    prefix = tmp_path / "prefix"
    plan = CliRunner().invoke(cli, ["plan", str(experiment), "--prefix", str(prefix), "--json"])
    import json

    output = Path(json.loads(plan.output)["steps"][0]["output_path"])
    output.parent.mkdir(parents=True)
    output.symlink_to(outside)
    for verb in (["run"], ["run", "--force", "g/raw"], ["plan"]):
        result = CliRunner().invoke(cli, [*verb, str(experiment), "--prefix", str(prefix)])
        assert result.exit_code == 2, result.output
        assert "outside the prefix" in result.output and "Traceback" not in result.output
    assert list(outside.iterdir()) == []
