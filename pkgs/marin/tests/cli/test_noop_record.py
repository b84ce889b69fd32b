"""The no-op record (``marin.cli.noop``): a repeated, unchanged ``marin run`` is answered from
``stat`` calls without importing the experiment, and anything it depended on that changes sends
the command back to the full path.

One real ``marin`` process builds a tiny experiment, a second (a no-op) writes the record, a third
is answered from it; what each change would do to that record is then checked in this process
(``why_changed``), and what the key covers (environment, options, targets) on the command line
alone (``request_of``)."""

from __future__ import annotations

import marshal
import os
import shutil
import subprocess
import textwrap
import time
from pathlib import Path

import steps_for_tests as t

from marin.cli import noop
from marin.execution.store.stat_cache import stat_cache_path

MARIN = os.path.join(t.WORKSPACE, ".venv", "bin", "marin")

EXPERIMENT = """
import json, os
import helper
from marin.execution.core.sources import source
from marin.execution.core.step import Step
import steps_for_tests as t

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "imports.log"), "a") as f:  # the import's side effect the tests count
    f.write("imported\\n")
with open(os.path.join(here, "settings.json")) as f:
    settings = json.load(f)
first = Step(name="noop/first", fn=t.noop, config={"scale": helper.SCALE, "data": source(os.path.join(here, "data/*.txt"))})
steps = [Step(name="noop/second", fn=t.noop, config={"n": settings["n"], "upstream": first})]
"""


def _settle(*paths: Path) -> None:
    """Date files and folders 10 s back: a record trusts no file modified moments before it was read."""
    when = time.time() - 10
    for path in paths:
        os.utime(path, (when, when))


def _experiment(tmp_path: Path) -> Path:
    exp = tmp_path / "exp"
    (exp / "data").mkdir(parents=True)
    (exp / "data" / "a.txt").write_text("a\n")
    (exp / "data" / "b.txt").write_text("b\n")
    (exp / "helper.py").write_text("SCALE = 2\n")
    (exp / "settings.json").write_text('{"n": 3}\n')
    (exp / "exp.py").write_text(textwrap.dedent(EXPERIMENT))
    (exp / "imports.log").write_text("")
    return exp


def _marin(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([MARIN, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _imports(exp: Path) -> int:
    return len((exp / "imports.log").read_text().splitlines())


def test_an_unchanged_noop_is_answered_from_its_record_and_every_change_it_depends_on_is_seen(
        tmp_path: Path, subprocess_env: dict[str, str]) -> None:
    exp = _experiment(tmp_path)
    store, cache = tmp_path / "store", tmp_path / "cache"
    cache.mkdir()
    env = {**subprocess_env, "MARIN_STAT_CACHE": str(cache / "stat.sqlite")}
    args = ["run", "exp/exp.py", "--prefix", "store"]
    built = _marin(args, env, tmp_path)
    assert "2 ran" in built.stdout
    assert not (cache / "noop").exists() or not list((cache / "noop").iterdir()), "a run that built left a record"
    _settle(*(exp / "data").iterdir(), exp / "data", *exp.glob("*.*"), exp, tmp_path)

    full = _marin(args, env, tmp_path)  # a no-op, in full: it writes the record
    for _ in range(2):
        if (cache / "noop").exists():
            break
        # None written: a folder it read (the workspace, on sys.path) changed moments before, as
        # another test may make it do; a record trusts no such folder, so once more, later.
        time.sleep(2.5)
        full = _marin(args, env, tmp_path)
    assert "plan: 2 steps: 2 cached" in full.stdout
    [written] = (cache / "noop").iterdir()
    imported = _imports(exp)
    answered = _marin(["-v", *args], env, tmp_path)
    assert answered.stdout == full.stdout, "the answer prints what the full no-op printed"
    assert f"answered from the no-op record {written}" in answered.stderr
    assert _imports(exp) == imported, "the answer imported the experiment"
    disabled = _marin(args, {**env, noop.DISABLE_VARIABLE: "1"}, tmp_path)
    assert disabled.stdout == full.stdout and _imports(exp) == imported + 1

    record = marshal.loads(written.read_bytes())
    key = record["key"]
    assert noop.why_changed(record, key) is None

    def changes(*expected: tuple[Path, str]) -> None:
        """Each of ``expected`` is a reason the record no longer holds, and nothing else is (a path's
        ``stat`` changed, or another question about it got another answer: ``asked``)."""
        found = set()
        while (why := noop.why_changed(record, key)) is not None:
            if why.endswith(": its content changed"):  # a small file read: its digest goes with its stat
                path = why.removesuffix(": its content changed")
                assert any(Path(path) == p for p, _ in expected), why
                record["digests"][path] = noop.content_digest(path)
                continue
            if ": " in why and " was " in why:  # another question: "PATH: KIND was X, now Y"
                path = why.partition(": ")[0]
                assert (Path(path), "asked") in expected, why
                found.add((Path(path), "asked"))
                for check in record["checks"]:
                    if check[1] == path:
                        check[3] = noop.ask(check[0], path, check[2])  # as if recorded again
                continue
            path, _, what = why.partition(" ")
            assert (Path(path), what) in expected, why
            found.add((Path(path), what))
            record["paths"][path] = noop.ask(noop.STAT, path)  # as if recorded again
        assert found == set(expected)

    (exp / "exp.py").write_text((exp / "exp.py").read_text() + "\n# edited\n")
    changes((exp / "exp.py", "changed"))
    (exp / "helper.py").write_text("SCALE = 3\n")
    changes((exp / "helper.py", "changed"))
    (exp / "settings.json").write_text('{"n": 4}\n')  # read by the experiment at import
    changes((exp / "settings.json", "changed"))
    os.utime(exp / "data" / "a.txt")  # touched: the source's files are watched by stat
    changes((exp / "data" / "a.txt", "changed"))
    (exp / "data" / "c.txt").write_text("c\n")  # a file added to the glob's folder
    changes((exp / "data", "changed"))
    (exp / "data" / "b.txt").unlink()
    changes((exp / "data", "changed"), (exp / "data" / "b.txt", "is gone"))
    (exp / "config").mkdir()
    (exp / "config" / "marin.yaml").write_text("prefix: elsewhere\n")  # a configuration file appears
    changes((exp, "changed"), (exp / "config" / "marin.yaml", "appeared"), (exp / "config" / "marin.yaml", "asked"))
    [root] = (store / ".marin" / "roots").iterdir()  # the run's GC root (marin roots)
    root.unlink()  # dropped (`marin roots rm`): the next run registers it again in full
    assert noop.why_changed(record, key) == f"{root} is gone"
    del record["paths"][str(root)]

    output = next(p for p in (store / "noop").iterdir() if p.name.startswith("second-"))
    shutil.rmtree(output)  # removed (as by hand, or gc)
    assert noop.why_changed(record, key) == f"{output}/.marin/success.json is gone"
    del record["paths"][f"{output}/.marin/success.json"]
    marker = next(m for m in record["markers"] if m.startswith("noop%second-"))
    (store / ".marin" / "done" / marker).unlink()
    assert noop.why_changed(record, key) == f"{marker} is no longer in the done index"


def test_the_key_covers_the_command_line_and_the_environment(tmp_path: Path, monkeypatch) -> None:
    env = {"HOME": str(tmp_path), "EXPERIMENTS_SCALE": "smoke"}
    base = noop.request_of(["run", "exp.py", "--prefix", "store"], env)
    assert base is not None and not base.verbose
    for verbose in (["-v", "run", "exp.py", "--prefix", "store"], ["run", "exp.py", "--prefix", "store", "-v"],
                    ["run", "--verbose", "exp.py", "--prefix", "store"]):
        same = noop.request_of(verbose, {**env, "PWD": "/x", "SHLVL": "3"})
        assert same is not None and same.verbose and same.key == base.key, verbose
    for args, environ in [
        (["run", "exp.py", "--prefix", "store"], {**env, "EXPERIMENTS_SCALE": "full"}),
        (["run", "exp.py", "--prefix", "store"], {**env, "MARIN_PREFIX": "elsewhere"}),
        (["run", "other.py", "--prefix", "store"], env),
        (["run", "exp.py", "--prefix", "store2"], env),
        (["run", "exp.py", "--prefix=store"], env),
        (["run", "exp.py", "--prefix", "store", "--only", "noop/*"], env),
        (["run", "exp.py", "--prefix", "store", "--only", "-v"], env),
        (["run", "exp.py", "--prefix", "store", "-j", "2", "--code-changes", "warn", "--no-warm-workers"], env),
    ]:
        other = noop.request_of(args, environ)
        assert other is not None and other.key != base.key, args
    for args in (["plan", "exp.py"], ["run"], ["run", "exp.py", "--force", "noop/*"], ["run", "exp.py", "--dry-run"],
                 ["run", "exp.py", "--cache", "c"], ["run", "exp.py", "--strict-env"], ["run", "exp.py", "--no-fast"],
                 ["run", "exp.py", "--code-changes", "rebuild"], ["run", "exp.py", "--code-changes=rebuild"],
                 ["run", "exp.py", "--backend", "ray"], ["run", "exp.py", "--prefix"], ["--help", "run", "exp.py"],
                 ["run", "exp.py", "--require-cached"]):  # CI's gate is always answered in full
        assert noop.request_of(args, env) is None, args
    host = os.uname()
    monkeypatch.setattr(os, "uname", lambda: os.uname_result((host.sysname, "another-host", *host[2:])))
    elsewhere = noop.request_of(["run", "exp.py", "--prefix", "store"], env)
    assert elsewhere is not None and elsewhere.key != base.key, "a home shared by hosts: a record per host"
    monkeypatch.undo()
    assert noop.request_of(["run", "exp.py"], {**env, noop.DISABLE_VARIABLE: "1"}) is None
    assert noop.request_of(["run", "exp.py"], {**env, noop.DISABLE_VARIABLE: "0"}) is not None


def test_records_are_kept_beside_the_stat_cache(tmp_path: Path, monkeypatch) -> None:
    for name, value in (("MARIN_STAT_CACHE", str(tmp_path / "mine" / "stat.sqlite")),
                        ("XDG_CACHE_HOME", str(tmp_path / "xdg"))):
        monkeypatch.delenv("MARIN_STAT_CACHE", raising=False)
        monkeypatch.setenv(name, value)
        assert noop.records_folder(os.environ) == os.path.join(os.path.dirname(stat_cache_path()), "noop")
