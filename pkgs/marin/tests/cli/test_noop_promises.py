"""The no-op record answers "cached" only where the full path does (issue 54): each way a careful
read found it answering "cached" while ``MARIN_NO_FAST_NOOP=1 marin plan`` had a step to run, as
its own reproduction.

* a file under the store's prefix that is no step's output (``--prefix .``: the experiment file
  itself, a data file it reads at import, a ``source()``'s file) is an input like any other;
* a dependency's handle lowered while planning (an ``ArtifactStep``'s ``build_config``) is watched
  as the experiment's import is: its random source makes the command unrecordable;
* a same-size edit with the modification time put back (in place, or ``cp`` over the file) shows
  (the change time and, for a small file, its content are in the record);
* standard input read at import (``sys.stdin.read()``, ``open(0)``) makes the command unrecordable;
* a file opened relative to a folder descriptor (``os.open(name, dir_fd=...)``, ``os.fwalk``) is
  recorded as the file it names.

``marin run`` runs in this process (:mod:`testsupport.noop_inprocess`), but for standard input,
which is the console script's own (a subprocess given its input).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
import steps_for_tests as t

from marin.cli import noop_recording
from testsupport.noop_inprocess import full_to_run, marin_run

MARIN = os.path.join(t.WORKSPACE, ".venv", "bin", "marin")

HEAD = """
import os, sys
from marin.execution.core.step import Step
import steps_for_tests as t

here = os.path.dirname(os.path.abspath(__file__))
"""


def _settle(*paths: Path) -> None:
    """Date paths 10 s back: a record trusts no file modified moments before it was read."""
    when = time.time() - 10
    for path in paths:
        os.utime(path, (when, when), follow_symlinks=False)


def _settle_tree(root: Path) -> None:
    _settle(*root.rglob("*"), root)


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """(write an experiment's files, then build it and record its no-op): what each test starts from."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cache").mkdir()
    monkeypatch.setenv("MARIN_STAT_CACHE", str(tmp_path / "cache" / "stat.sqlite"))
    for name in [k for k in os.environ if k.startswith("MARIN_") and k != "MARIN_STAT_CACHE"]:
        monkeypatch.delenv(name)

    def record(exp: Path, prefix: str, args: tuple[str, ...] = ()) -> list[str]:
        run = [str(exp), "--prefix", prefix, *args]
        built = marin_run(run, forget=[str(exp.parent)])
        assert built.code == 0, built.stdout + built.stderr
        for _ in range(3):
            _settle_tree(tmp_path)
            full = marin_run(run, forget=[str(exp.parent)])
            assert full.code == 0 and not full.answered and "cached" in full.stdout, full.stdout + full.stderr
            assert noop_recording.refusal() is None, noop_recording.refusal()
            if full.no_record is None or "moments before" not in full.no_record:
                break
            # A file of the workspace it imported was edited moments before (by another test, or a
            # person): a record trusts no such file; once more, later.
            time.sleep(2.5)
        assert full.no_record is None, full.no_record
        answered = marin_run(run, forget=[str(exp.parent)])
        assert answered.answered and answered.stdout == full.stdout, "no record was written, or it does not hold"
        return run

    return record


def _recorded_again(run: list[str], root: Path) -> None:
    """Record ``run`` again (a no-op in full) until its record answers it."""
    for _ in range(3):
        _settle_tree(root)
        assert marin_run(run, forget=[str(root)]).code == 0
        if marin_run(run, forget=[str(root)]).answered:
            return
        time.sleep(2.5)  # a file it read was edited moments before (the workspace, by someone else)
    raise AssertionError(f"no record of {run} answers it")


def _experiment(folder: Path, body: str, name: str = "exp.py") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(HEAD) + textwrap.dedent(body))
    return path


def _answers_as_full_path(run: list[str], exp: Path, prefix: str) -> None:
    """The full path now has a step to run, and the record does not answer "cached"."""
    to_run = full_to_run([str(exp)], prefix, forget=[str(exp.parent)])
    assert to_run, "the change was meant to change the plan"
    again = marin_run(run, forget=[str(exp.parent)])
    assert not again.answered, f"the record answered {again.stdout!r} where the full path runs {to_run}"


def test_files_under_the_prefix_that_are_no_step_output_are_inputs(tmp_path: Path, recorded) -> None:
    exp = _experiment(tmp_path, """
        from marin.execution.core.sources import source
        with open(os.path.join(here, "settings.txt")) as f:
            n = f.read().strip()
        steps = [Step(name="under-prefix", fn=t.noop, config={"n": n, "edit": 1,
                                                                "data": source(os.path.join(here, "data.txt"))})]
    """)
    (tmp_path / "settings.txt").write_text("3\n")
    (tmp_path / "data.txt").write_text("data\n")
    run = recorded(exp, ".")
    for change in (lambda: exp.write_text(exp.read_text().replace('"edit": 1', '"edit": 2')),
                   lambda: (tmp_path / "settings.txt").write_text("44\n"),
                   lambda: (tmp_path / "data.txt").write_text("other data\n")):
        saved = {p: p.read_bytes() for p in (exp, tmp_path / "settings.txt", tmp_path / "data.txt")}
        change()
        _answers_as_full_path(run, exp, ".")
        for p, content in saved.items():
            p.write_bytes(content)
        _recorded_again(run, tmp_path)  # the plan is the first one: a record of it holds again


def test_a_dependency_handle_lowered_while_planning_is_watched(tmp_path: Path, recorded) -> None:
    exp = _experiment(tmp_path / "exp", """
        import random
        from marin.execution.compat.artifact_step import ArtifactStep

        def make(config):
            pass

        dep = ArtifactStep(name="dep", version="v1", artifact_type=None, run=make,
                           build_config=lambda ctx: {"coin": random.random() < 2})  # reads a random source
        top = ArtifactStep(name="top", version="v1", artifact_type=None, run=make,
                           build_config=lambda ctx: {"dep": ctx.artifact_path(dep)})
        steps = [top]
    """)
    run = [str(exp), "--prefix", str(tmp_path / "store")]
    assert marin_run(run, forget=[str(exp.parent)]).code == 0
    _settle_tree(tmp_path)
    full = marin_run(run, forget=[str(exp.parent)])
    assert full.code == 0 and "2 cached" in full.stdout, full.stdout + full.stderr
    why = noop_recording.refusal()
    assert why is not None and "random" in why and f"{exp}:" in why, why
    assert not marin_run(run, forget=[str(exp.parent)]).answered


@pytest.mark.parametrize("how", ["in place", "cp over it"])
def test_a_same_size_edit_with_its_mtime_put_back_shows(tmp_path: Path, recorded, how: str) -> None:
    exp = _experiment(tmp_path / "exp", """
        with open(os.path.join(here, "in.txt")) as f:
            n = f.read()
        steps = [Step(name="same-size", fn=t.noop, config={"n": n})]
    """)
    data = tmp_path / "exp" / "in.txt"
    data.write_text("3\n")
    (tmp_path / "new.txt").write_text("4\n")  # before the record: its folder may be one the record lists
    run = recorded(exp, str(tmp_path / "store"))
    st = data.stat()
    if how == "in place":
        data.write_text("4\n")
    else:
        shutil.copyfile(tmp_path / "new.txt", data)
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert data.stat().st_size == st.st_size and data.stat().st_mtime_ns == st.st_mtime_ns
    _answers_as_full_path(run, exp, str(tmp_path / "store"))


@pytest.mark.parametrize("read", ["sys.stdin.read()", "open(0).read()"])
def test_standard_input_read_at_import_makes_the_command_unrecordable(
        tmp_path: Path, subprocess_env: dict[str, str], read: str) -> None:
    exp = _experiment(tmp_path / "exp", f"""
        n = {read}.strip()
        steps = [Step(name="stdin", fn=t.noop, config={{"n": n}})]
    """)
    env = {**subprocess_env, "MARIN_STAT_CACHE": str(tmp_path / "cache" / "stat.sqlite")}
    args = [MARIN, "run", str(exp), "--prefix", str(tmp_path / "store")]

    def marin(text: str, *verbose: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([args[0], *verbose, *args[1:]], input=text, env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    assert "1 ran" in marin("3").stdout
    _settle_tree(tmp_path)
    assert "1 cached" in marin("3").stdout  # a no-op: it would write its record
    other = marin("4", "-v")
    assert "1 ran" in other.stdout, "the record answered for another input"
    assert "no no-op record for this run" in other.stderr and "reads standard input" in other.stderr, other.stderr


@pytest.mark.parametrize("how", ["os.open(dir_fd=)", "os.fwalk"])
def test_a_file_opened_relative_to_a_folder_descriptor_is_recorded_as_the_file_it_names(
        tmp_path: Path, recorded, how: str) -> None:
    read = {
        "os.open(dir_fd=)": """
            folder = os.open(os.path.join(here, "inputs"), os.O_RDONLY)
            fd = os.open("in.txt", os.O_RDONLY, dir_fd=folder)
            n = os.read(fd, 100).decode()
            os.close(fd)
            os.close(folder)
        """,
        "os.fwalk": """
            n = []
            for _root, _dirs, files, rootfd in os.fwalk(os.path.join(here, "inputs")):
                for name in sorted(files):
                    fd = os.open(name, os.O_RDONLY, dir_fd=rootfd)
                    n.append(os.read(fd, 100).decode())
                    os.close(fd)
        """,
    }[how]
    exp = _experiment(tmp_path / "exp", textwrap.dedent(read) + 'steps = [Step(name="dir-fd", fn=t.noop, config={"n": n})]\n')
    (tmp_path / "exp" / "inputs").mkdir()
    data = tmp_path / "exp" / "inputs" / "in.txt"
    data.write_text("3\n")
    run = recorded(exp, str(tmp_path / "store"))
    data.write_text("44\n")
    _answers_as_full_path(run, exp, str(tmp_path / "store"))
