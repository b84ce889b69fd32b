"""A differential fuzzer of the no-op record (issue 54): the record never answers "cached" where the
full path (the experiment imported again and planned) has a step to run.

A catalogue of ways an experiment reads an input at import (:data:`READERS`: files read a dozen
ways, folders listed and walked, links, archives' members, a sibling module, package data, a
distribution's metadata, ``source()``, the machine and the environment, and what no ``stat`` can
check: SQLite, ``shelve``, ``mmap``, standard input, a subprocess, the clock). Each reader is its own
experiment, built, then recorded by a real ``marin run`` in the test's process (a fresh interpreter)
(:mod:`testsupport.noop_inprocess`). Then, in a seeded order, one input of one reader changes one way
it can (:data:`CHANGES`: content, same-size content with the modification time put back, in place,
copied over or replaced, removed, renamed, added, a link retargeted, the environment or the command
line), and the record's answer (does it still hold?) is compared with the full path's: where the
full path runs a step, the record must not hold, or must have been refused (unrecordable). The
change is undone and the command recorded again, by ``marin run`` again, before the next case.

It prints the number of cases, of refused ones, and of those where the record was stricter than
the full path (it sent the command to the full path, which found nothing to run).
"""

from __future__ import annotations

import marshal
import os
import random
import shutil
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from marin.cli import noop, noop_recording
from marin.cli.targets import load_targets
from marin.execution.run.runner import StepRunner
from testsupport.fresh import call_in_fresh_interpreter
from testsupport.noop_inprocess import full_to_run, marin_run

SEED = 54

FILE, FOLDER, LINK, ZIP, TAR, MODULE, PACKAGE, DIST, SHELF, ENV, NONE = (
    "file", "folder", "link", "zip", "tar", "module", "package", "dist", "shelf", "env", "none")


@dataclass(frozen=True)
class Reader:
    """One way of reading an input at import: ``code`` is the body of a function returning the value
    the step's config holds (``here`` is the experiment's folder, ``inputs`` its ``inputs/``)."""

    name: str
    kind: str
    code: str
    refused: bool = False
    """Whether the record must refuse it (what it reads, no ``stat`` can check)."""
    file: str = "in.txt"
    """The input file's name (kinds file, zip, tar, package)."""
    texts: tuple[str, str, str] = ("3\n", "44\n", "4\n")
    """The input's content: as built, another size, the same size."""


READERS = [
    Reader("open().read", FILE, "return open(os.path.join(inputs, 'in.txt')).read()"),
    Reader("Path.read_text", FILE, "return Path(inputs, 'in.txt').read_text()"),
    Reader("Path.read_bytes", FILE, "return Path(inputs, 'in.txt').read_bytes()"),
    Reader("io.open", FILE, "import io\nwith io.open(os.path.join(inputs, 'in.txt')) as f:\n    return f.read()"),
    Reader("codecs.open", FILE, "import codecs\nwith codecs.open(os.path.join(inputs, 'in.txt'), encoding='utf-8') as f:\n"
                                "    return f.read()"),
    Reader("open(opener=dir_fd)", FILE, "folder = os.open(inputs, os.O_RDONLY)\n"
                                        "with open('in.txt', opener=lambda p, fl: os.open(p, fl, dir_fd=folder)) as f:\n"
                                        "    return f.read()"),
    Reader("os.open+os.read", FILE, "fd = os.open(os.path.join(inputs, 'in.txt'), os.O_RDONLY)\n"
                                    "try:\n    return os.read(fd, 100)\nfinally:\n    os.close(fd)"),
    Reader("os.open(dir_fd=)", FILE, "folder = os.open(inputs, os.O_RDONLY)\nfd = os.open('in.txt', os.O_RDONLY, dir_fd=folder)\n"
                                     "try:\n    return os.read(fd, 100)\nfinally:\n    os.close(fd)"),
    Reader("json.load", FILE, "import json\nwith open(os.path.join(inputs, 'in.json')) as f:\n    return json.load(f)",
           file="in.json", texts=('{"n": 3}', '{"n": 44}', '{"n": 4}')),
    Reader("configparser", FILE, "import configparser\nc = configparser.ConfigParser()\n"
                                 "c.read(os.path.join(inputs, 'in.ini'))\nreturn dict(c['s'])",
           file="in.ini", texts=("[s]\nn = 3\n", "[s]\nn = 44\n", "[s]\nn = 4\n")),
    Reader("tomllib", FILE, "import tomllib\nwith open(os.path.join(inputs, 'in.toml'), 'rb') as f:\n"
                            "    return tomllib.load(f)", file="in.toml", texts=("n = 3\n", "n = 44\n", "n = 4\n")),
    Reader("csv", FILE, "import csv\nwith open(os.path.join(inputs, 'in.csv'), newline='') as f:\n"
                        "    return list(csv.reader(f))", file="in.csv", texts=("a,3\n", "a,44\n", "a,4\n")),
    Reader("linecache", FILE, "import linecache\nreturn linecache.getline(os.path.join(inputs, 'in.txt'), 1)"),
    Reader("fileinput", FILE, "import fileinput\nwith fileinput.input(files=[os.path.join(inputs, 'in.txt')]) as f:\n"
                              "    return list(f)"),
    Reader("pickle.load", FILE, "import pickle\nwith open(os.path.join(inputs, 'in.pkl'), 'rb') as f:\n"
                                "    return pickle.load(f)", file="in.pkl"),
    Reader("hashlib.file_digest", FILE, "import hashlib\nwith open(os.path.join(inputs, 'in.txt'), 'rb') as f:\n"
                                        "    return hashlib.file_digest(f, 'sha256').hexdigest()"),
    Reader("exec of a file", FILE, "scope = {}\nexec(open(os.path.join(inputs, 'in.py')).read(), scope)\n"
                                   "return scope['N']", file="in.py", texts=("N = 3\n", "N = 44\n", "N = 4\n")),
    Reader("runpy.run_path", FILE, "import runpy\nreturn runpy.run_path(os.path.join(inputs, 'in.py'))['N']",
           file="in.py", texts=("N = 3\n", "N = 44\n", "N = 4\n")),
    Reader("os.path.getmtime", FILE, "return os.path.getmtime(os.path.join(inputs, 'in.txt'))"),
    Reader("os.path.getsize", FILE, "return os.path.getsize(os.path.join(inputs, 'in.txt'))"),
    Reader("os.stat", FILE, "st = os.stat(os.path.join(inputs, 'in.txt'))\nreturn (st.st_size, st.st_mtime_ns)"),
    Reader("Path.stat", FILE, "return Path(inputs, 'in.txt').stat().st_size"),
    Reader("os.path.exists", FILE, "return os.path.exists(os.path.join(inputs, 'in.txt'))"),
    Reader("os.path.isfile", FILE, "return os.path.isfile(os.path.join(inputs, 'in.txt'))"),
    Reader("os.access", FILE, "return os.access(os.path.join(inputs, 'in.txt'), os.R_OK)"),
    Reader("source(file)", FILE, "return source(os.path.join(inputs, 'in.txt'))"),
    Reader("gzip", FILE, "import gzip\nwith gzip.open(os.path.join(inputs, 'in.gz'), 'rt') as f:\n    return f.read()",
           file="in.gz"),
    Reader("os.stat of a folder", FOLDER, "return os.stat(os.path.join(inputs, 'd')).st_mtime_ns"),
    Reader("glob", FOLDER, "import glob\nreturn sorted(glob.glob(os.path.join(inputs, 'd', '*.txt')))"),
    Reader("glob with **, recursive", FOLDER, "import glob\nreturn sorted(glob.glob(os.path.join(inputs, 'd', '**', '*.txt'), recursive=True))"),
    Reader("glob and read", FOLDER, "import glob\nreturn [open(p).read() for p in sorted(glob.glob(os.path.join(inputs, 'd', '*.txt')))]"),
    Reader("os.listdir", FOLDER, "return sorted(os.listdir(os.path.join(inputs, 'd')))"),
    Reader("fnmatch over a listing", FOLDER, "import fnmatch\nreturn sorted(fnmatch.filter(os.listdir(os.path.join(inputs, 'd')), '*.txt'))"),
    Reader("os.scandir", FOLDER, "return sorted((e.name, e.is_dir()) for e in os.scandir(os.path.join(inputs, 'd')))"),
    Reader("scandir entry stat", FOLDER, "return sorted((e.name, e.stat().st_size) for e in os.scandir(os.path.join(inputs, 'd')))"),
    Reader("os.walk", FOLDER, "return sorted((r, sorted(f)) for r, _, f in os.walk(os.path.join(inputs, 'd')))"),
    Reader("os.walk sizes", FOLDER, "return sorted(os.path.getsize(os.path.join(r, n)) for r, _, f in os.walk(os.path.join(inputs, 'd')) for n in f)"),
    Reader("os.fwalk", FOLDER, "return sorted((r, sorted(f)) for r, _, f, _fd in os.fwalk(os.path.join(inputs, 'd')))"),
    Reader("os.fwalk and read", FOLDER, "out = []\nfor r, _, files, fd in os.fwalk(os.path.join(inputs, 'd')):\n"
                                        "    for n in sorted(files):\n        f = os.open(n, os.O_RDONLY, dir_fd=fd)\n"
                                        "        out.append((r, n, os.read(f, 100)))\n        os.close(f)\nreturn sorted(out)"),
    Reader("Path.iterdir", FOLDER, "return sorted(p.name for p in Path(inputs, 'd').iterdir())"),
    Reader("Path.glob", FOLDER, "return sorted(p.name for p in Path(inputs, 'd').glob('*.txt'))"),
    Reader("Path.rglob", FOLDER, "return sorted(str(p) for p in Path(inputs, 'd').rglob('*.txt'))"),
    Reader("os.path.isdir", FOLDER, "return os.path.isdir(os.path.join(inputs, 'd', 'sub'))"),
    Reader("source(glob)", FOLDER, "return source(os.path.join(inputs, 'd', '*.txt'))"),
    Reader("open through a link", LINK, "return open(os.path.join(inputs, 'link')).read()"),
    Reader("os.path.realpath", LINK, "return os.path.basename(os.path.realpath(os.path.join(inputs, 'link')))"),
    Reader("os.readlink", LINK, "return os.readlink(os.path.join(inputs, 'link'))"),
    Reader("Path.exists on a link", LINK, "return Path(inputs, 'link').exists()"),
    Reader("os.path.islink", LINK, "return [os.path.islink(os.path.join(inputs, 'link')), os.path.lexists(os.path.join(inputs, 'link'))]"),
    Reader("zip member", ZIP, "import zipfile\nwith zipfile.ZipFile(os.path.join(inputs, 'in.zip')) as z:\n"
                              "    return z.read('in.txt')", file="in.zip"),
    Reader("tar member", TAR, "import tarfile\nwith tarfile.open(os.path.join(inputs, 'in.tar')) as t:\n"
                              "    return t.extractfile('in.txt').read()", file="in.tar"),
    Reader("a sibling module", MODULE, "import importlib\nreturn importlib.import_module(SIBLING).N",
           texts=("N = 3\n", "N = 44\n", "N = 4\n")),
    Reader("importlib.resources", PACKAGE, "import importlib.resources\n"
                                           "return importlib.resources.files(PACKAGE).joinpath('in.txt').read_text()"),
    Reader("pkgutil.get_data", PACKAGE, "import pkgutil\nreturn pkgutil.get_data(PACKAGE, 'in.txt')"),
    Reader("importlib.metadata", DIST, "import importlib.metadata\nreturn importlib.metadata.version(DISTRIBUTION)"),
    Reader("os.environ", ENV, "return os.environ.get('FUZZ_SETTING', '')"),
    Reader("time zone", ENV, "import time\nreturn [os.environ.get('TZ', ''), time.tzname]"),
    Reader("locale", ENV, "import locale\nreturn [os.environ.get('LC_ALL', ''), locale.getlocale()]"),
    Reader("getpass.getuser", ENV, "import getpass\nreturn getpass.getuser()"),
    Reader("sys.argv", ENV, "return sys.argv[1:]"),
    Reader("os.getcwd", ENV, "return os.getcwd()"),
    Reader("platform.node", NONE, "import platform\nreturn platform.node()"),
    Reader("os.cpu_count", NONE, "return os.cpu_count()"),
    Reader("socket.gethostname", NONE, "import socket\nreturn socket.gethostname()", refused=True),
    Reader("sqlite", FILE, "import sqlite3\nreturn sqlite3.connect(os.path.join(inputs, 'in.txt')).total_changes",
           refused=True),
    Reader("shelve", SHELF, "import shelve\nwith shelve.open(os.path.join(inputs, 'shelf'), flag='r') as s:\n"
                            "    return dict(s)"),
    Reader("mmap", FILE, "import mmap\nwith open(os.path.join(inputs, 'in.txt'), 'rb') as f:\n"
                         "    return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)[:]", refused=True),
    Reader("sys.stdin", NONE, "try:\n    return sys.stdin.read()\nexcept (OSError, ValueError):\n    return ''",
           refused=True),
    Reader("subprocess", NONE, "import subprocess\nreturn subprocess.run(['true']).returncode", refused=True),
    Reader("the clock", NONE, "import time\nreturn time.time() > 0", refused=True),
]

HEAD = '''\
import os, sys
from pathlib import Path
from marin.execution.core.sources import Source, source
from marin.execution.core.step import Step
import steps_for_tests as t

here = os.path.dirname(os.path.abspath(__file__))
inputs = os.path.join(here, "inputs")
SIBLING, PACKAGE, DISTRIBUTION = {sibling!r}, {package!r}, {distribution!r}


def _value():
{body}


try:
    value = _value()
except (OSError, KeyError, ValueError, ImportError) as e:  # a removed input: the value says so
    value = f"absent: {{type(e).__name__}}"
steps = [Step(name={step!r}, fn=t.noop, config={{"value": value if isinstance(value, Source) else repr(value)}})]
'''


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_").lower()


class Case:
    """One reader's experiment: its folder, what of it a change may touch, and how to rebuild it."""

    def __init__(self, root: Path, reader: Reader):
        self.reader = reader
        slug = _slug(reader.name)
        self.folder = root / slug
        self.exp = self.folder / f"exp_{slug}.py"
        self.sibling, self.package, self.distribution = f"sib_{slug}", f"pkg_{slug}", f"fuzzdist_{slug}"
        self.pristine = root.parent / "pristine" / slug

    def write(self) -> None:
        inputs = self.folder / "inputs"
        inputs.mkdir(parents=True)
        a = self.reader.texts[0]
        kind = self.reader.kind
        if kind == FILE:
            _write_input(inputs / self.reader.file, a)
        elif kind == FOLDER:
            (inputs / "d" / "sub").mkdir(parents=True)
            for name, text in (("a.txt", "a\n"), ("b.txt", "bb\n"), ("sub/c.txt", "c\n"), ("x.md", "x\n")):
                (inputs / "d" / name).write_text(text)
        elif kind == LINK:
            (inputs / "t1").write_text("one\n")
            (inputs / "t2").write_text("two2\n")
            (inputs / "link").symlink_to("t1")
        elif kind in (ZIP, TAR):
            _write_input(inputs / self.reader.file, a)
        elif kind == MODULE:
            (self.folder / f"{self.sibling}.py").write_text(a)
        elif kind == PACKAGE:
            (self.folder / self.package).mkdir()
            (self.folder / self.package / "__init__.py").write_text("")
            (self.folder / self.package / "in.txt").write_text(a)
        elif kind == SHELF:
            _shelve(inputs / "shelf", a)
        elif kind == DIST:
            info = self.folder / f"{self.distribution}-1.0.dist-info"
            info.mkdir()
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {self.distribution}\nVersion: 1.0\n")
        body = textwrap.indent(self.reader.code, "    ")
        self.exp.write_text(HEAD.format(sibling=self.sibling, package=self.package, distribution=self.distribution,
                                        body=body, step=f"fuzz/{_slug(self.reader.name)}"))
        shutil.copytree(self.folder, self.pristine, symlinks=True)

    def restore(self) -> None:
        """Undo any change: the case's folder as it was written."""
        shutil.rmtree(self.folder)
        shutil.copytree(self.pristine, self.folder, symlinks=True)


def _write_input(path: Path, text: str) -> None:
    """An input of the kind its name says (a gzip, a zip or tar archive holding ``in.txt``), holding ``text``."""
    if path.suffix == ".gz":
        import gzip

        path.write_bytes(gzip.compress(text.encode(), mtime=0))
    elif path.suffix == ".zip":
        import zipfile

        with zipfile.ZipFile(path, "w") as z:
            z.writestr(zipfile.ZipInfo("in.txt", date_time=(2020, 1, 1, 0, 0, 0)), text)
    elif path.suffix == ".pkl":
        import pickle

        path.write_bytes(pickle.dumps(text))
    elif path.suffix == ".tar":
        import io
        import tarfile

        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
            info = tarfile.TarInfo("in.txt")
            info.size = len(text.encode())
            t.addfile(info, io.BytesIO(text.encode()))
    else:
        path.write_text(text)


def _shelve(path: Path, text: str) -> None:
    import shelve

    with shelve.open(str(path)) as shelf:
        shelf["n"] = text


def _put_back(path: Path, st: os.stat_result) -> None:
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def _file_changes(case: Case, path: Path, spare: Path) -> dict[str, Callable[[], object]]:
    """The ways one input file can change (``spare``: a file beside the case holding the same-size content)."""
    _b, other, same = case.reader.texts

    def same_size() -> None:
        st = path.stat()
        _write_input(path, same)
        _put_back(path, st)

    def copied_over() -> None:
        st = path.stat()
        shutil.copyfile(spare, path)
        _put_back(path, st)

    def replaced() -> None:
        st = path.stat()
        new = path.with_name(path.name + ".new")
        shutil.copyfile(spare, new)
        _put_back(new, st)
        os.replace(new, path)

    return {
        "content": lambda: _write_input(path, other),
        "same size, mtime put back": same_size,
        "copied over, mtime put back": copied_over,
        "replaced, mtime put back": replaced,
        "removed": path.unlink,
        "renamed": lambda: path.rename(path.with_name(path.name + ".old")),
        "touched": lambda: os.utime(path),
    }


def _changes(case: Case, spare: Path) -> dict[str, Callable[[], object]]:
    """Every way the case's input can change (applied to the case's folder; undone by :meth:`Case.restore`)."""
    inputs = case.folder / "inputs"
    kind = case.reader.kind
    if kind in (FILE, ZIP, TAR):
        return _file_changes(case, inputs / case.reader.file, spare)
    if kind == MODULE:
        return _file_changes(case, case.folder / f"{case.sibling}.py", spare)
    if kind == PACKAGE:
        return _file_changes(case, case.folder / case.package / "in.txt", spare)
    if kind == FOLDER:
        d = inputs / "d"
        found = _file_changes(case, d / "a.txt", spare)
        return {
            "a file's content": found["content"],
            "a file's same-size content, mtime put back": found["same size, mtime put back"],
            "a file added": lambda: (d / "new.txt").write_text("n\n"),
            "a file of another suffix added": lambda: (d / "new.md").write_text("n\n"),
            "a file added below": lambda: (d / "sub" / "new.txt").write_text("n\n"),
            "a file removed": (d / "b.txt").unlink,
            "a file renamed": lambda: (d / "b.txt").rename(d / "b2.txt"),
            "a folder added": (d / "sub2").mkdir,
            "the folder removed": lambda: shutil.rmtree(d),
        }
    if kind == LINK:
        link = inputs / "link"

        def retarget(target: str) -> Callable[[], None]:
            def change() -> None:
                link.unlink()
                link.symlink_to(target)
            return change

        def target_same_size() -> None:
            st = (inputs / "t1").stat()
            (inputs / "t1").write_text("ONE\n")
            _put_back(inputs / "t1", st)

        return {"retargeted": retarget("t2"), "retargeted, dangling": retarget("nowhere"),
                "the target's content": lambda: (inputs / "t1").write_text("one more\n"),
                "the target's same-size content, mtime put back": target_same_size,
                "the target removed": (inputs / "t1").unlink, "the link removed": link.unlink}
    if kind == SHELF:
        shelf = inputs / "shelf"
        return {"content": lambda: _shelve(shelf, case.reader.texts[1]),
                "same content": lambda: _shelve(shelf, case.reader.texts[0]),
                "removed": lambda: [p.unlink() for p in inputs.glob("shelf*")]}
    if kind == DIST:
        info = case.folder / f"{case.distribution}-1.0.dist-info"

        def version(text: str, put_back: bool) -> Callable[[], None]:
            def change() -> None:
                st = (info / "METADATA").stat()
                (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {case.distribution}\nVersion: {text}\n")
                if put_back:
                    _put_back(info / "METADATA", st)
            return change

        return {"content": version("10.0", False), "same size, mtime put back": version("2.0", True),
                "removed": lambda: shutil.rmtree(info),
                "renamed": lambda: info.rename(case.folder / f"{case.distribution}-2.0.dist-info")}
    return {}


_KEYED = {"os.environ": ("FUZZ_SETTING", "on"), "time zone": ("TZ", "Asia/Tokyo"), "locale": ("LC_ALL", "C"),
          "getpass.getuser": ("USER", "someone-else")}
"""The environment readers' change: a variable set (the key covers the environment)."""


_BASE_PATH: list[str] = []
"""``sys.path`` as the test began: each command starts from it, as a fresh process would."""


def _fresh() -> None:
    """``sys.path`` as a fresh ``marin`` process has it (no other case's folder: its listing is no
    question this case's command asks)."""
    sys.path[:] = _BASE_PATH


def _settle(folder: Path, when: float) -> None:
    """Date everything under ``folder`` to ``when`` (long enough ago for a record to trust it; the
    same every time, so a value read from a modification time is the built one again)."""
    for path in (*folder.rglob("*"), folder):
        os.utime(path, (when, when), follow_symlinks=False)


def _record(case: Case, prefix: str, when: float) -> tuple[str | None, dict | None]:
    """``marin run`` the case, a no-op, in full: (why the record was refused, the record written)."""
    args = [str(case.exp), "--prefix", prefix]
    for _ in range(3):
        _settle(case.folder, when)
        _fresh()
        ran = marin_run(args, forget=[str(case.folder.parent)])
        assert ran.code == 0 and not ran.answered and "1 cached" in ran.stdout, (case.reader.name, ran.stdout + ran.stderr)
        refused = noop_recording.refusal()
        if refused is not None:
            return refused, None
        if ran.no_record is None:
            return None, marshal.loads(Path(ran.record).read_bytes())
        # A file the command read was edited moments before (the workspace, by another test or a person).
        assert "moments before" in ran.no_record, (case.reader.name, ran.no_record)
        time.sleep(2.5)
    raise AssertionError(f"{case.reader.name}: no record written: {ran.no_record}")


def _workspace(tmp_path: Path) -> Path:
    """The cases' folder, the working folder, with records beside a stat cache of its own. Set in
    the fuzzer's own interpreter (:func:`fuzz`), which ends with it: nothing to put back."""
    os.chdir(tmp_path)
    (tmp_path / "cache").mkdir()
    for name in [k for k in os.environ if k.startswith("MARIN_")]:
        del os.environ[name]
    os.environ["MARIN_STAT_CACHE"] = str(tmp_path / "cache" / "stat.sqlite")
    # The host's accelerator stated, not looked for in its device files by each of the hundreds of
    # commands (twice a run): what is fuzzed is the experiment's reads, not the host's.
    os.environ["MARIN_ACCELERATOR"] = "none"
    for name, _value in _KEYED.values():
        os.environ.pop(name, None)
    sys.dont_write_bytecode = True  # no __pycache__ appearing in a case's folder
    _BASE_PATH[:] = sys.path  # each experiment's folder goes on sys.path; each command starts from this
    return tmp_path


def test_the_record_answers_as_the_full_path_does_after_any_one_change(tmp_path: Path) -> None:
    # In an interpreter of its own: each command drops and lists every module loaded (a pytest
    # worker's thousands, JAX's among them; a fresh `marin` holds a few hundred): half the cost. This
    # module imports no pytest, so that interpreter holds what a `marin` process holds, not pytest's
    # modules too (a tenth of the cost again: every record lists and every answer stats them).
    call_in_fresh_interpreter(__file__, "fuzz", tmp_path)


def fuzz(tmp_path: Path) -> None:
    """The fuzzer, every case and assertion (called in a fresh interpreter)."""
    _fuzz(_workspace(tmp_path))


def _fuzz(workspace: Path) -> None:
    started = time.monotonic()
    assert len(READERS) >= 40 and len({_slug(r.name) for r in READERS}) == len(READERS)
    root, prefix, spares = workspace / "cases", str(workspace / "store"), workspace / "spares"
    spares.mkdir()
    cases = [Case(root, reader) for reader in READERS]
    for case in cases:
        case.write()
        _write_input(spares / f"{_slug(case.reader.name)}{Path(case.reader.file).suffix}", case.reader.texts[2])
    when = time.time() - 100
    _settle(root, when)
    # Built once, all together, in this process.
    steps = []
    for case in cases:  # each imported as `marin run` imports it (what its command line says included)
        _fresh()
        saved, sys.argv = sys.argv, ["marin", "run", str(case.exp), "--prefix", prefix]
        try:
            steps += load_targets([str(case.exp)])
        finally:
            sys.argv = saved
    runner = StepRunner(prefix=prefix, strict_env=False, client=_in_process())
    try:
        assert runner.run(steps).ok
    finally:
        runner.close()
    _settle(workspace, when)  # the working folder, where the store and the cases were made

    counts = {"cases": 0, "refused": 0, "stricter": 0, "agreed": 0, "keyed": 0, "full_s": 0.0, "record_s": 0.0}
    records: dict[str, tuple[str | None, dict | None]] = {}
    for case in cases:
        records[case.reader.name] = _record(case, prefix, when)
        refused = records[case.reader.name][0]
        assert (refused is not None) == case.reader.refused, (case.reader.name, refused)
    order = [(case, change) for case in cases for change in [*_changes(case, spares / f"{_slug(case.reader.name)}"
                                                                     f"{Path(case.reader.file).suffix}"),
                                                            "nothing", "the command line", "the working folder"]]
    random.Random(SEED).shuffle(order)
    for case, change in order:
        _one_case(case, change, prefix, records, counts, spares, when)
    elapsed = time.monotonic() - started
    print(f"\nno-op record fuzzer (seed {SEED}): {counts['cases']} cases over {len(READERS)} readers, "
          f"{counts['refused']} refused (unrecordable), {counts['keyed']} answered by another key, "
          f"{counts['agreed']} where both answered alike, {counts['stricter']} where the record was stricter; "
          f"{elapsed:.1f} s (full {counts['full_s']:.1f} s, record {counts['record_s']:.1f} s)")
    assert counts["cases"] >= 300


def _key(args: list[str]) -> str | None:
    request = noop.request_of(args)
    return request.key if request is not None else None


def _in_process():  # the steps are steps_for_tests.noop: run them here, no worker processes
    from fray.inprocess import InProcessClient

    return InProcessClient()


def _one_case(case: Case, change: str, prefix: str, records: dict, counts: dict[str, int], spares: Path,
              when: float) -> None:
    """Change one input one way, compare the answers, undo, and record again."""
    counts["cases"] += 1
    name = case.reader.name
    refused, record = records[name]
    args = ["run", str(case.exp), "--prefix", prefix]
    if refused is not None:
        counts["refused"] += 1
        return
    assert record is not None
    stale = noop.why_changed(record, record["key"])
    if stale is not None:  # a workspace file it imported was edited meanwhile (by a person, another test)
        assert str(case.folder.parent) not in stale, (name, f"another case's change moved what its record holds: {stale}")
        records[name] = _record(case, prefix, when)
        refused, record = records[name]
        assert refused is None and record is not None, (name, refused)
    key = record["key"]
    _fresh()
    if change in ("the command line", "the working folder"):
        # What a record is keyed by: another command line or working folder is another record.
        assert _key(args) == key, (name, "the key of the same command differs")
        other = noop.request_of([*args, "-j", "3"]) if change == "the command line" else None
        if change == "the working folder":
            here = os.getcwd()
            os.chdir(case.folder)
            try:
                other = noop.request_of(args)
            finally:
                os.chdir(here)
        assert other is not None and other.key != key, (name, change)
        counts["keyed"] += 1
        return
    if change == "nothing" and name in _KEYED:
        variable, value = _KEYED[name]
        assert _key(args) == key, (name, "the key of the same command differs")
        os.environ[variable] = value
        try:
            other = noop.request_of(args)
        finally:
            del os.environ[variable]
        assert other is not None and other.key != key, (name, variable)
        counts["keyed"] += 1
        return
    if change != "nothing":
        spare = spares / f"{_slug(name)}{Path(case.reader.file).suffix}"
        _changes(case, spare)[change]()
    t0 = time.monotonic()
    try:
        full = full_to_run([str(case.exp)], prefix, forget=[str(case.folder.parent)])
    except Exception as e:  # noqa: BLE001 - the full path fails (a source matches nothing): no "cached" either
        full = [f"fails: {type(e).__name__}: {e}"]
    counts["full_s"] += time.monotonic() - t0
    why = noop.why_changed(record, key)
    assert not (why is None and full), f"{name}, {change}: the record answers cached, the full path runs {full}"
    counts["agreed" if (why is None) == (not full) else "stricter"] += 1
    if change == "nothing":
        # Nothing of the case changed: the record holds, unless a file outside it that the command
        # imported was edited meanwhile (the workspace or the environment, by a person or another test).
        assert why is None or str(case.folder.parent) not in why, f"{name}: the record does not hold: {why}"
        return
    case.restore()
    t0 = time.monotonic()
    records[name] = _record(case, prefix, when)
    counts["record_s"] += time.monotonic() - t0
    assert records[name][0] is None, (name, change, records[name][0])
