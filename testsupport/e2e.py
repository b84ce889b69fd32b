"""Helpers for the end-to-end tests: run the real ``marin`` CLI and experiment modules as subprocesses.

* :func:`marin` / :func:`plan_json` run the console script of this environment.
* :data:`PIPELINE` is a small experiment file (five cheap steps) that tests write into ``tmp_path``
  and edit, so cache behaviour is checked without training anything.
* :func:`nano_prefix` and :func:`experiments_prefix` build the expensive graphs once per pytest
  process and share the prefix between test modules: ``python -m experiments.train_nano`` first
  (its own test needs that first run), then ``make experiments`` on the same prefix, at the smoke
  size (``experiments.scale``: every step kind, a fraction of the training). The tests that use
  them carry :data:`shares_nano_store`, so that under ``pytest -n`` they all run in one worker,
  one after another, on that one prefix.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testsupport.cpu_devices import for_long_runs

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MARIN = str(BIN / "marin")


@dataclass
class Ran:
    """A finished subprocess: exit status, output and wall time."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        return (f"$ {' '.join(self.args)}\nexit {self.returncode} after {self.seconds:.1f}s\n"
                f"--- stdout ---\n{self.stdout[-6000:]}\n--- stderr ---\n{self.stderr[-6000:]}")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without ``MARIN_*`` settings (they would redirect the prefix), with
    the experiments at their smoke size (``experiments.scale``; ``extra`` may set it back to full)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARIN_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["EXPERIMENTS_SCALE"] = "smoke"
    env.update(extra)
    return env


def compiled_for_long_runs(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the compile settings of the builds that run many real training steps
    (``testsupport.cpu_devices.LONG_RUN_COMPILE_FLAGS`` in place of the root conftest's quick ones):
    at the tests' -O0 the nano model's 400 steps took 144 s against 87 s at XLA's defaults, where
    compiling tiny programs, which -O0 speeds, is the lesser part. Nothing compares their outputs bit
    for bit with a program compiled in the test's own process."""
    return {**env, "XLA_FLAGS": for_long_runs(env.get("XLA_FLAGS", ""))}


def run(args: list[str], *, cwd: Path = ROOT, env: dict[str, str] | None = None, check: bool = True,
        timeout: float = 900) -> Ran:
    """Run ``args``; with ``check``, fail the test (showing the output) on a non-zero exit.

    The command runs in a session of its own; on timeout the whole session is killed, so that a
    ``make`` cut short leaves no ``marin run`` behind it still training and holding leases.
    """
    start = time.monotonic()
    with subprocess.Popen(args, cwd=cwd, env=env or clean_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            ran = Ran(list(args), -signal.SIGKILL, stdout, stderr, time.monotonic() - start)
            raise AssertionError(f"command timed out after {timeout:.0f}s (its session was killed)\n"
                                 f"{ran.describe()}") from None
    ran = Ran(list(args), proc.returncode, stdout, stderr, time.monotonic() - start)
    if check and ran.returncode != 0:
        raise AssertionError(f"command failed\n{ran.describe()}")
    return ran


def marin(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, check: bool = True) -> Ran:
    """The ``marin`` console script of this environment."""
    return run([MARIN, *args], cwd=cwd, env=env, check=check)


def plan_json(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``marin plan --json ARGS``, parsed."""
    ran = marin("plan", "--json", *args, cwd=cwd, env=env)
    try:
        return json.loads(ran.stdout)
    except ValueError as e:
        raise AssertionError(f"marin plan --json printed no JSON ({e})\n{ran.describe()}") from None


def actions(plan: dict[str, Any]) -> dict[str, str]:
    """``{step name: action}`` of a ``plan --json`` document."""
    return {s["name"]: s["action"] for s in plan["steps"]}


def steps_by_name(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in plan["steps"]}


_EVENT = re.compile(r"^\[(start|ran|cached|failed|wait)\]\s+(\S+)", re.M)


def events(stdout: str, kind: str) -> list[str]:
    """Step names on the runner's plain progress lines of one kind (``start``, ``ran`` ...).

    ``[start]`` lines carry ``name-hash16``; the hash suffix is stripped.
    """
    found = []
    for k, name in _EVENT.findall(stdout):
        if k == kind:
            found.append(re.sub(r"-[0-9a-f]{16}$", "", name))
    return found


def success_records(prefix: Path) -> dict[str, int]:
    """``{relative path: mtime_ns}`` of every success record under ``prefix``."""
    return {str(p.relative_to(prefix)): p.stat().st_mtime_ns for p in prefix.rglob(".marin/success.json")}


def entry(prefix: Path, name: str) -> Path:
    """The single finished-or-not output folder of step ``name`` under ``prefix``."""
    parent = prefix / name
    found = sorted(parent.parent.glob(f"{parent.name}-" + "[0-9a-f]" * 16))
    if len(found) != 1:
        raise AssertionError(f"expected one output of {name} under {prefix}, found {[str(f) for f in found]}")
    return found[0]


# A small experiment: base -> stats, base -> scaled -> total, and an independent `other`.
PIPELINE = '''\
"""A cheap graph for cache tests (generated by testsupport/e2e.py)."""

import json
from dataclasses import dataclass

from marin.execution.step import Step, output_path_of
from rigging import filesystem as fs


@dataclass(frozen=True)
class BaseConfig:
    n: int = 50


@dataclass(frozen=True)
class FromFile:
    path: str
    factor: int = 1


@dataclass(frozen=True)
class OtherConfig:
    text: str = "hello"


def write_base(config, output_path):
    fs.atomic_write(fs.join(output_path, "numbers.txt"), "".join(f"{i}\\n" for i in range(config.n)))


def write_stats(config, output_path):
    values = [int(v) for v in fs.read_text(config.path).split()]
    fs.atomic_write(fs.join(output_path, "stats.json"), json.dumps({"count": len(values), "sum": sum(values)}))


def write_scaled(config, output_path):
    values = [int(v) * config.factor for v in fs.read_text(config.path).split()]
    fs.atomic_write(fs.join(output_path, "scaled.txt"), "".join(f"{v}\\n" for v in values))


def write_total(config, output_path):
    values = [int(v) for v in fs.read_text(config.path).split()]
    fs.atomic_write(fs.join(output_path, "total.json"), json.dumps({"total": sum(values)}))


def write_other(config, output_path):
    fs.atomic_write(fs.join(output_path, "other.txt"), config.text)


base = Step(name="pipe/base", fn=write_base, config=BaseConfig(n=50))
stats = Step(name="pipe/stats", fn=write_stats, config=FromFile(path=output_path_of(base, "numbers.txt")))
scaled = Step(name="pipe/scaled", fn=write_scaled, config=FromFile(path=output_path_of(base, "numbers.txt"), factor=2))
total = Step(name="pipe/total", fn=write_total, config=FromFile(path=output_path_of(scaled, "scaled.txt")))
other = Step(name="pipe/other", fn=write_other, config=OtherConfig(text="hello"))

steps = [stats, total, other]
'''

PIPELINE_STEPS = ("pipe/base", "pipe/stats", "pipe/scaled", "pipe/total", "pipe/other")


def pipeline_total(n: int = 50, factor: int = 2) -> int:
    """What ``pipe/total`` must hold for the given values."""
    return factor * n * (n - 1) // 2


def write_pipeline(folder: Path, name: str = "pipeline.py") -> Path:
    """Write :data:`PIPELINE` into ``folder`` (outside the workspace: its module name is its stem)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(PIPELINE)
    return path


def edit(path: Path, old: str, new: str) -> None:
    """Replace one occurrence of ``old`` in ``path`` (fails if it is not there exactly once)."""
    text = path.read_text()
    if text.count(old) != 1:
        raise AssertionError(f"{old!r} occurs {text.count(old)} times in {path}")
    path.write_text(text.replace(old, new))


# -- the expensive graphs, built once per pytest process --------------------------------------

_SHARED: dict[str, Any] = {}


def nano_prefix(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Ran]:
    """A prefix where ``python -m experiments.train_nano`` ran once from scratch, and that run."""
    if "nano" not in _SHARED:
        prefix = tmp_path_factory.mktemp("shared-prefix")
        ran = run([sys.executable, "-m", "experiments.train_nano"],
                  env=compiled_for_long_runs(clean_env(MARIN_PREFIX=str(prefix))), check=False)
        _SHARED["nano"] = (prefix, ran)
    return _SHARED["nano"]


NANO_STORE_GROUP = "nano-store"
"""The xdist group of the tests that share the built nano store: the suite's longest group (the
smoke ``make experiments`` twice alone takes 5-7 minutes of one worker), which the root conftest
sends out first."""

shares_nano_store = pytest.mark.xdist_group(NANO_STORE_GROUP)
"""Mark for every test that calls :func:`nano_prefix` or :func:`experiments_prefix`: under ``pytest -n``
they run in one worker (``--dist loadgroup``), so the prefix is built once and never written by two
tests at a time."""

# A first smoke-size `make experiments` trains about twenty tiny models and runs some forty
# evaluations: a few minutes on a quiet 2-core machine, more on a slow or busy one. The tests that
# may be the first to build it are allowed that much (pytest's own limit is 600 s a test).
MAKE_EXPERIMENTS_TIMEOUT_S = 2700


def builds_experiments(test: Any) -> Any:
    """Mark for a test that may be the first to call :func:`experiments_prefix` (with its time)."""
    return shares_nano_store(pytest.mark.timeout(MAKE_EXPERIMENTS_TIMEOUT_S + 300)(test))


def make_experiments(prefix: Path, check: bool = True) -> Ran:
    """``make experiments`` with ``MARIN_PREFIX=prefix`` (``-o setup``: the environment is this one)."""
    return run(["make", "--no-print-directory", "-o", "setup", "experiments"],
               env=compiled_for_long_runs(clean_env(MARIN_PREFIX=str(prefix))), check=check,
               timeout=MAKE_EXPERIMENTS_TIMEOUT_S)


def experiments_prefix(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Ran]:
    """The prefix of :func:`nano_prefix` after a first ``make experiments``, and that run."""
    if "experiments" not in _SHARED:
        prefix, nano = nano_prefix(tmp_path_factory)
        if nano.returncode != 0:
            raise AssertionError(f"python -m experiments.train_nano failed\n{nano.describe()}")
        _SHARED["experiments"] = (prefix, make_experiments(prefix, check=False))
    prefix, ran = _SHARED["experiments"]
    if ran.returncode != 0:  # every test that needs it fails with it; none builds it again
        raise AssertionError(f"make experiments failed\n{ran.describe()}")
    return prefix, ran
