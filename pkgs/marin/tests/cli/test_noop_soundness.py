"""The no-op record is never less sound than the full path (issue 48): whatever an experiment asks
the file system at import is in the record and asked again, and whatever it does that no ``stat``
can check makes the command unrecordable.

* The issue's reproduction, end to end through the console script: a config field set from
  ``os.path.exists(flags/on)``; after ``touch flags/on`` the next ``marin run`` runs the step.
* A seeded property loop over every kind of question (``os.path.exists``, ``Path.is_file``,
  ``getmtime``, ``getsize``, ``isdir``, ``glob``, ``realpath`` through a link, ``os.access``, an
  ``os.scandir`` entry's ``stat``, ``os.walk``, ``lexists`` and ``islink`` of a dangling link): each change alone, the record's answer (does it
  still hold?) is compared with the full path's (the plan made from the experiment imported again).
* What the record cannot see (a file read by native code, ``git rev-parse``, ``sqlite3``,
  ``date.today()`` in a step name, ``time.time``, ``uuid4``, an installed package's function, a
  kernel file): each makes the command unrecordable, with the reason ``marin run -v`` prints.
"""

from __future__ import annotations

import json
import marshal
import os
import random
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import steps_for_tests as t

from marin.cli import noop
from marin.cli.targets import load_targets
from marin.execution.core.identity import module_name_for_path
from marin.execution.run.runner import StepRunner

MARIN = os.path.join(t.WORKSPACE, ".venv", "bin", "marin")

WATCHED = '''
import glob, os
from pathlib import Path
from marin.execution.core.step import Step
import steps_for_tests as t

here = Path(__file__).resolve().parent
inputs = here / "inputs"
config = {
    "flag": os.path.exists(here / "flags" / "on"),
    "is_file": (inputs / "maybe").is_file(),
    "mtime": int(os.path.getmtime(inputs / "dated")),
    "size": os.path.getsize(inputs / "sized"),
    "is_dir": os.path.isdir(inputs / "folder"),
    "texts": len(glob.glob(str(inputs / "many" / "*.txt"))),
    "link": os.path.basename(os.path.realpath(inputs / "link")),
    "runnable": os.access(inputs / "tool", os.X_OK),
    "newest": max((e.stat().st_mtime_ns for e in os.scandir(inputs / "scanned")), default=0),
    "walked": sorted(f for _, _, files in os.walk(inputs / "tree") for f in files),
    "dangling": [os.path.lexists(inputs / "dangling"), os.path.islink(inputs / "dangling")],
}
steps = [Step(name="watched", fn=t.noop, config=config)]
'''


def _settle(*paths: Path) -> None:
    """Date files and folders 10 s back: a record trusts no file modified moments before it was read."""
    when = time.time() - 10
    for path in paths:
        os.utime(path, (when, when), follow_symlinks=False)


def _watched(tmp_path: Path) -> Path:
    exp = tmp_path / "exp"
    inputs = exp / "inputs"
    for folder in ("flags", "inputs/many", "inputs/scanned", "inputs/tree/sub", "inputs/targets"):
        (exp / folder).mkdir(parents=True)
    (exp / "watched.py").write_text(textwrap.dedent(WATCHED))
    for name, text in (("dated", "d"), ("sized", "1234"), ("tool", "#!/bin/sh\n"), ("many/a.txt", "a"),
                       ("scanned/s1", "1"), ("scanned/s2", "2"), ("tree/sub/leaf", "l"), ("targets/one", "1"),
                       ("targets/two", "2")):
        (inputs / name).write_text(text)
    (inputs / "link").symlink_to(inputs / "targets" / "one")
    _settle(*[p for p in exp.rglob("*")], exp, tmp_path)
    return exp


def _marin(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([MARIN, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _recorded(args: list[str], env: dict[str, str], cwd: Path, cache: Path) -> Path:
    """Run ``args`` (a no-op) until it writes its record (a folder it read may have changed moments
    before: the experiment's ``__pycache__``, another test's files in the workspace); the record."""
    for _ in range(3):
        _marin(args, env, cwd)
        found = list((cache / "noop").glob("*.noop")) if (cache / "noop").exists() else []
        if found:
            return found[0]
        time.sleep(2.5)
    raise AssertionError(f"no no-op record written for {args}")


def _to_run(exp_file: Path, store: Path) -> list[str]:
    """The full path's answer: the experiment imported again and planned; the steps that would run."""
    sys.modules.pop(module_name_for_path(str(exp_file)), None)
    steps = load_targets([str(exp_file)])
    plan = StepRunner(prefix=str(store), strict_env=False).plan(steps)
    return sorted(p.name for p in plan.to_run())


def _refresh(record: dict) -> None:
    """Record again what the record asked, as the recorder would after a run with the same plan."""
    for path in record["paths"]:
        record["paths"][path] = noop.ask(noop.STAT, path)
    for check in record["checks"]:
        check[3] = noop.ask(check[0], check[1], check[2])
    for path in record["digests"]:
        record["digests"][path] = noop.content_digest(path)


def _changes(inputs: Path, exp: Path) -> dict[str, tuple[Callable[[], object], Callable[[], object], bool]]:
    """Each kind of question: (a change of its input alone, the change back, whether the change
    changes the plan: one that does not shows the record may be stricter than the plan, never laxer)."""
    flag, maybe, folder = exp / "flags" / "on", inputs / "maybe", inputs / "folder"
    sized, dated, tool = inputs / "sized", inputs / "dated", inputs / "tool"

    def resize(text: str) -> None:
        st = sized.stat()
        sized.write_text(text)
        os.utime(sized, ns=(st.st_atime_ns, st.st_mtime_ns))  # the same mtime: only the size tells

    def relink(target: str) -> None:
        (inputs / "link").unlink()
        (inputs / "link").symlink_to(inputs / "targets" / target)

    when = dated.stat().st_mtime_ns
    scanned = (inputs / "scanned" / "s2").stat().st_mtime_ns
    return {
        "os.path.exists": (flag.touch, flag.unlink, True),
        "Path.is_file": (lambda: maybe.write_text("m"), maybe.unlink, True),
        "Path.is_file (a folder)": (maybe.mkdir, maybe.rmdir, False),
        "getmtime": (lambda: os.utime(dated, ns=(when, when - 7 * 10**9)), lambda: os.utime(dated, ns=(when, when)),
                     True),
        "getsize": (lambda: resize("12345"), lambda: resize("1234"), True),
        "isdir": (folder.mkdir, folder.rmdir, True),
        "glob": (lambda: (inputs / "many" / "b.txt").write_text("b"), (inputs / "many" / "b.txt").unlink, True),
        "glob (another suffix)": (lambda: (inputs / "many" / "b.md").write_text("b"), (inputs / "many" / "b.md").unlink,
                                  False),
        "realpath": (lambda: relink("two"), lambda: relink("one"), True),
        "os.access": (lambda: tool.chmod(0o755), lambda: tool.chmod(0o644), True),
        "scandir entry stat": (lambda: os.utime(inputs / "scanned" / "s2", ns=(scanned, scanned + 10**9)),
                               lambda: os.utime(inputs / "scanned" / "s2", ns=(scanned, scanned)), True),
        "os.walk": (lambda: (inputs / "tree" / "sub" / "new").write_text("n"), (inputs / "tree" / "sub" / "new").unlink,
                    True),
        "lexists, islink": (lambda: (inputs / "dangling").symlink_to(inputs / "nowhere"), (inputs / "dangling").unlink,
                            True),
    }


def test_the_record_answers_as_the_full_path_does_after_any_one_change(
        tmp_path: Path, subprocess_env: dict[str, str]) -> None:
    exp = _watched(tmp_path)
    store, cache = tmp_path / "store", tmp_path / "cache"
    cache.mkdir()
    env = {**subprocess_env, "MARIN_STAT_CACHE": str(cache / "stat.sqlite")}
    args = ["run", "exp/watched.py", "--prefix", "store"]
    assert "1 ran" in _marin(args, env, tmp_path).stdout
    _settle(tmp_path, exp)  # the store was made in it, the experiment's __pycache__ in exp
    written = _recorded(args, env, tmp_path, cache)
    answered = _marin(["-v", *args], env, tmp_path)
    assert f"answered from the no-op record {written}" in answered.stderr
    record = marshal.loads(written.read_bytes())
    key = record["key"]

    # The reproduction, through the console script: touch flags/on, and the step runs.
    (exp / "flags" / "on").touch()
    after = _marin(["-v", *args], env, tmp_path)
    assert "does not hold" in after.stderr and str(exp / "flags" / "on") in after.stderr, after.stderr
    assert "1 ran" in after.stdout and "config changed: flag: false → true" in after.stdout, after.stdout
    (exp / "flags" / "on").unlink()
    for built in store.glob("watched-*"):  # the flag's build goes: the loop below sets the flag again
        if built.name in after.stdout.split("will run ")[1]:
            shutil.rmtree(built)
            for marker in (store / ".marin" / "done").glob(built.name + "*"):
                marker.unlink()
    _refresh(record)  # the flag gone again: the plan is the recorded one (its build is still in the store)
    assert noop.why_changed(record, key) is None and _to_run(exp / "watched.py", store) == []

    # Every kind of question, one change at a time in a seeded order: wherever the full path would
    # run the step, the record must not hold. After each change is undone the plan is the recorded
    # one again, and the record is refreshed as a new recording would make it.
    changes = _changes(exp / "inputs", exp)
    order = list(changes)
    random.Random(48).shuffle(order)
    for kind in order:
        change, undo, changes_plan = changes[kind]
        change()
        full = _to_run(exp / "watched.py", store)
        assert full == (["watched"] if changes_plan else []), f"{kind}: the change is not the one meant"
        if full:
            assert noop.why_changed(record, key) is not None, f"{kind}: the record says cached, the full path runs {full}"
        undo()
        assert _to_run(exp / "watched.py", store) == []
        _refresh(record)
        assert noop.why_changed(record, key) is None, kind


DRIVER = '''
import json, os, sys
from marin.cli import noop, noop_recording
from marin.cli.targets import load_targets

found = {}
for path in sys.argv[1:]:
    noop_recording.start(noop.Request("test", os.devnull, False))
    noop_recording.watch_calls()
    try:
        load_targets([path])
    except BaseException as e:  # noqa: BLE001 - reported, not hidden
        found[path] = f"error: {type(e).__name__}: {e}"
        continue
    found[path] = noop_recording.refusal()
    noop_recording.abandon()
sys.__stdout__.write(json.dumps(found) + "\\n")
'''

UNSEEN = {
    "native": ("from tokenizers import Tokenizer\n"
               "value = Tokenizer.from_file(os.path.join(here, 'tokenizer.json')).get_vocab_size()",
               "Tokenizer.from_file, native code"),
    "git": ("import subprocess\n"
            "value = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=here, capture_output=True, text=True).stdout",
            "runs a process (audit event subprocess.Popen)"),
    "git through Marin": ("from marin.execution.store.environment import environment_fingerprint\n"
                          "value = environment_fingerprint(here)['git_commit']",
                          "runs a process (audit event subprocess.Popen)"),
    "sqlite": ("import sqlite3\n"
               "value = sqlite3.connect(os.path.join(here, 'settings.db')).execute('select 1').fetchone()[0]",
               "_sqlite3.connect, native code"),
    "today": ("import datetime\nvalue = None\nname = f'daily-{datetime.date.today().isoformat()}'",
              "datetime.date.today, which reads the clock"),
    "now": ("from datetime import datetime\nvalue = datetime.now().year", "datetime.datetime.now, which reads the clock"),
    "clock": ("import time\nvalue = int(time.time()) // 86400", "time.time, which reads the clock"),
    "uuid": ("import uuid\nvalue = str(uuid.uuid4())", "uuid.uuid4, which reads a random source"),
    "random": ("import random\nvalue = random.randint(0, 9)", "random.Random.randint, which reads a random source"),
    "numpy": ("import numpy\nvalue = float(numpy.linspace(0, 1, 3)[1])", "into the installed package numpy"),
    "kernel": ("value = open('/proc/cpuinfo').read().count('processor')", "reads /proc/cpuinfo"),
    "free space": ("import shutil\nvalue = shutil.disk_usage(here).free", "shutil.disk_usage, which reads free space"),
}
EXPANDING = '''
from marin.execution.core.step import Step
from marin.execution.core.traits import StepTraits, step_function


def expand_nothing(step, output_path):
    return []


@step_function(StepTraits(expand=expand_nothing))
def expanding(config, output_path):
    pass


steps = [Step(name="expanding", fn=expanding, config={})]
'''
IMPORTS_ONLY = "import numpy, tokenizers  # imported, never called: importing a package is not calling it\nvalue = 1"


def _unseen_experiment(folder: Path, kind: str, body: str) -> Path:
    path = folder / f"unseen_{kind.replace(' ', '_')}.py"
    path.write_text(textwrap.dedent("""
        import os
        from marin.execution.core.step import Step
        import steps_for_tests as t

        here = os.path.dirname(os.path.abspath(__file__))
        name = "unseen"
    """) + body + "\nsteps = [Step(name=name, fn=t.noop, config={'value': value})]\n")
    return path


def test_what_no_stat_can_check_makes_a_command_unrecordable(tmp_path: Path, subprocess_env: dict[str, str]) -> None:
    from tokenizers import Tokenizer, models

    exp = tmp_path / "exp"
    exp.mkdir()
    Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")).save(str(exp / "tokenizer.json"))
    subprocess.run(["git", "init", "-q", str(exp)], check=True)
    files = {kind: _unseen_experiment(exp, kind, body) for kind, (body, _reason) in UNSEEN.items()}
    # End to end first: `marin -v run` says why, and a no-op of it leaves no record.
    cache = tmp_path / "cache"
    env = {**subprocess_env, "MARIN_STAT_CACHE": str(cache / "stat.sqlite")}
    args = ["run", str(files["today"]), "--prefix", "store"]
    said = _marin(["-v", *args], env, tmp_path).stderr
    assert f"no no-op record for this run: {files['today']}:" in said and "datetime.date.today" in said, said
    again = _marin(args, env, tmp_path)
    assert "1 cached" in again.stdout
    assert not (cache / "noop").exists() or not list((cache / "noop").iterdir())
    # A step whose expander is the experiment's own code: it runs after the import, unwatched.
    expanding = exp / "expanding.py"
    expanding.write_text(EXPANDING)
    _marin(["run", str(expanding), "--prefix", "store"], env, tmp_path)
    said = _marin(["-v", "run", str(expanding), "--prefix", "store"], env, tmp_path).stderr
    assert "no no-op record for this run: expanding's expander is the experiment's own code" in said, said

    # Each kind, recorded the way `marin run` records (the experiment imported under the recorder).
    watched = _watched(tmp_path / "ok") / "watched.py"
    imports = _unseen_experiment(exp, "imports", IMPORTS_ONLY)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    proc = subprocess.run([sys.executable, str(driver), *map(str, files.values()), str(watched), str(imports)],
                          env=subprocess_env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    refused = json.loads(proc.stdout.splitlines()[-1])
    for kind, (_body, reason) in UNSEEN.items():
        why = refused[str(files[kind])]
        assert why is not None and reason in why and f"{files[kind]}:" in why, (kind, why)
    assert refused[str(watched)] is None, "stat questions are recordable"
    assert refused[str(imports)] is None, "imports of installed packages are recordable"

