"""What the soak (``testsupport/soak/__main__.py``) looks at while runners run: their processes, and the store.

Processes under a ``marin run`` runner (found by command line and parent):

* its warm templates (``fray.pool``): its own children whose command line is the template's;
* step processes: children of a template (forked, with its command line) that lead a session of
  their own (the template's import probes do not), or fresh interpreters of ``multiprocessing`` the
  runner started itself;
* shuffle workers: fresh interpreters a step process started (zephyr's tasks on fray's
  ``LocalClient``; only the dedup step of the soak graph has them).

In the store: where the dedup step's shuffle stands (its work files under ``<output>/.shuffle/``),
where the sweep's expansion stands (which of its steps are built), the lease files of every output
(:class:`LeaseWatch`) and every build's records (:class:`BuildLedger`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from fray.pool_template import template_main
from fray.warm_main import warm_main
from rigging import filesystem as fs
from testsupport.soak.graph import DEDUP, SWEEP, Call
from zephyr.shards import INDEX_FILE
from zephyr.shuffle import WORK_FOLDER

_TEMPLATE_MARK = f"from {template_main.__module__} import {template_main.__name__}"
"""In the command line of a warm template, and of every step process forked from it (taken from
fray: a literal went stale once when the template's code moved, and the soak then found no step
process to kill and killed runners only)."""
_WARM_MARK = f"from {warm_main.__module__} import {warm_main.__name__}"
"""In the command line of a warm accelerator process (``fray.warm_process``), which runs accelerator steps."""
_LEASE_RE = re.compile(r"^lease-(\d{8})\.json$")
_OUTPUT_RE = re.compile(r"^(.+)-[0-9a-f]{16}$")
_REUSED_RE = re.compile(r"group_by '[^']+': (\d+) map tasks done \((\d+) reused\)")
FOLDERS = ("soak", SWEEP)
"""The folders of the prefix that hold the graph's outputs."""


# -- processes ------------------------------------------------------------------------------------

def _tree(pid: int) -> list[tuple[Any, str, int]]:
    """Every live process under ``pid``: [(process, its command line, its parent pid)]."""
    import psutil

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        try:
            found.append((child, " ".join(child.cmdline()), child.ppid()))
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    return found


def _spawned(cmdline: str) -> bool:
    """A fresh interpreter of ``multiprocessing`` (not its resource tracker)."""
    return "spawn_main" in cmdline and "resource_tracker" not in cmdline


def templates(pid: int) -> list:
    """The warm templates of the runner ``pid``."""
    return [p for p, cmdline, ppid in _tree(pid) if _TEMPLATE_MARK in cmdline and ppid == pid]


def _leads_session(pid: int) -> bool:
    try:
        return os.getsid(pid) == pid
    except ProcessLookupError:
        return False


def warm_accelerator_processes(pid: int) -> list:
    """The warm accelerator processes of the runner ``pid`` (each runs its accelerator steps)."""
    return [p for p, cmdline, ppid in _tree(pid) if _WARM_MARK in cmdline and ppid == pid]


def step_processes(pid: int) -> list:
    """The step processes of the runner ``pid``: forked from one of its templates, fresh, or its
    warm accelerator process.

    A call forked from a template leads a session of its own (``setsid``); the template's import
    probes (also its children, with its command line) stay in the template's, and are not steps.
    """
    tree = _tree(pid)
    own = {p.pid for p, cmdline, ppid in tree if _TEMPLATE_MARK in cmdline and ppid == pid}
    return [p for p, cmdline, ppid in tree
            if (ppid in own and _leads_session(p.pid))
            or (ppid == pid and (_spawned(cmdline) or _WARM_MARK in cmdline))]


def shuffle_workers(pid: int) -> list:
    """The processes step processes of the runner ``pid`` started (zephyr's workers)."""
    steps = {p.pid for p in step_processes(pid)}
    return [p for p, cmdline, ppid in _tree(pid) if ppid in steps and _spawned(cmdline)]


def tree_pids(process: Any) -> set[int]:
    """``process`` and everything under it, by pid (empty if it is gone)."""
    import psutil

    try:
        return {process.pid, *(c.pid for c in process.children(recursive=True))}
    except psutil.NoSuchProcess:
        return set()


# -- the store ------------------------------------------------------------------------------------

def outputs(prefix: str) -> Iterator[tuple[str, str]]:
    """``(step name, output folder)`` of every output of the soak graph under ``prefix``."""
    for folder in FOLDERS:
        for entry in fs.listdir(fs.join(prefix, folder)):
            match = _OUTPUT_RE.match(entry)
            if match:
                yield f"{folder}/{match.group(1)}", fs.join(prefix, folder, entry)


def output_folder(prefix: str, name: str) -> str | None:
    """The output folder of step ``name`` under ``prefix`` (None: none yet)."""
    parent = fs.join(prefix, os.path.dirname(name))
    found = [n for n in fs.listdir(parent) if (m := _OUTPUT_RE.match(n)) and m.group(1) == os.path.basename(name)]
    return fs.join(parent, found[0]) if found else None


def is_done(path: str) -> bool:
    from marin.execution.store.records import StepRecord

    return StepRecord(path).is_done()


def running_pid(path: str) -> int | None:
    """The pid of the process building the output at ``path`` (its status record's ``worker``),
    while the record says it runs; None otherwise."""
    from marin.execution.store.records import StepRecord

    record = StepRecord(path)
    status = record.read_json(record.status) or {}
    worker = status.get("worker")
    if status.get("state") != "running" or not isinstance(worker, str) or is_done(path):
        return None
    pid = worker.split(":")[1] if worker.count(":") >= 2 else ""
    return int(pid) if pid.isdigit() else None


def leases_held_by(prefix: str, pid: int) -> dict[str, tuple[str, int]]:
    """Step name -> (output folder, lease number) of every live lease the runner ``pid`` holds."""
    from rigging.lease import current_lease

    held = {}
    for name, path in outputs(prefix):
        info = current_lease(fs.join(path, ".marin"))
        if info is not None and info.live() and info.holder.split(":")[1:2] == [str(pid)]:
            held[name] = (path, info.token)
    return held


def written_apart(path: str) -> bool:
    """True when the newest attempt at ``path`` (or its published build) writes in an attempt folder."""
    from marin.execution.store.records import StepRecord

    return StepRecord(path).files_folder(current=True) != path


def moved_on(path: str, token: int) -> bool:
    """True once the lease ``token`` on the output ``path`` is no longer its newest, or it is published."""
    from rigging.lease import current_lease

    info = current_lease(fs.join(path, ".marin"))
    return is_done(path) or info is None or info.token != token


@dataclass(frozen=True)
class ShuffleState:
    """Where the dedup step's shuffle stands."""

    phase: str
    """``none`` (no work files: before its map wave, or after the shuffle), ``map`` (work files,
    no index yet), ``reduce`` (every map task committed: the index is written), ``done`` (the step)."""
    commits: int = 0
    """Map tasks committed (commit records under ``.shuffle/<stage>/.commits/``)."""

    def __str__(self) -> str:
        return self.phase + (f", {self.commits} map task(s) committed" if self.phase in ("map", "reduce") else "")


def shuffle_state(prefix: str) -> ShuffleState:
    """The dedup step's shuffle, from its work files."""
    out = output_folder(prefix, DEDUP)
    if out is None:
        return ShuffleState("none")
    if is_done(out):
        return ShuffleState("done")
    work = fs.join(out, WORK_FOLDER)
    phase, commits = "none", 0
    for stage in fs.listdir(work):
        names = fs.listdir(fs.join(work, stage))
        # Commit records (zephyr.file_sink's layout): one JSON file per committed map task.
        commits += sum(1 for n in fs.listdir(fs.join(work, stage, ".commits")) if n.endswith(".json"))
        if INDEX_FILE in names:
            phase = "reduce"
        elif names and phase == "none":
            phase = "map"
    return ShuffleState(phase, commits)


def shuffle_files(prefix: str) -> set[str]:
    """The dedup step's shuffle work files: ``<stage>/<name>`` and ``<stage>/.commits/<name>``."""
    out = output_folder(prefix, DEDUP)
    if out is None:
        return set()
    work = fs.join(out, WORK_FOLDER)
    found = set()
    for stage in fs.listdir(work):
        found |= {f"{stage}/{n}" for n in fs.listdir(fs.join(work, stage))}
        found |= {f"{stage}/.commits/{n}" for n in fs.listdir(fs.join(work, stage, ".commits"))}
    return found


def sweep_built(prefix: str) -> list[str]:
    """The sweep's steps that are built (``round-0``, ``trial-1``, ``results`` ...)."""
    return sorted(name.removeprefix(SWEEP + "/") for name, path in outputs(prefix)
                  if name.startswith(SWEEP + "/") and is_done(path))


def expansion_state(prefix: str) -> tuple[str, list[str]]:
    """``("mid" | "before" | "built", built sweep steps)``: mid once a round (an expanding step) is
    built and before what it expanded into is (the results step is the last of it)."""
    built = sweep_built(prefix)
    if "results" in built:
        return "built", built
    return ("mid" if any(n.startswith("round-") for n in built) else "before"), built


def checkpoint_entries(prefix: str, model: str) -> set[str]:
    out = output_folder(prefix, model)
    return set(fs.listdir(fs.join(out, "checkpoints"))) if out else set()


# -- leases ---------------------------------------------------------------------------------------

class LeaseWatch:
    """Watches the lease files of the soak's steps while runners run, in a thread of its own.

    A lease number above 1 appearing on a step's ``.marin/`` is the lease taken again, classified by
    the file of the number before it: not released (its holder died or let it expire: a takeover)
    or released (its holder gave it up: its step failed or its runner was interrupted).
    """

    def __init__(self, prefix: str, interval: float = 0.1):
        self.prefix = prefix
        self.interval = interval
        self.newest: dict[str, int] = {}  # output folder -> newest lease number seen on it
        self.events: list[tuple[str, int, str]] = []  # (step name, number, "takeover" | "after release" | "?")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        for name, path in outputs(self.prefix):
            meta = fs.join(path, ".marin")
            numbers = sorted(int(m.group(1)) for m in map(_LEASE_RE.match, fs.listdir(meta)) if m)
            if not numbers:
                continue
            known = self.newest.get(path, 0)
            if numbers[-1] < known:
                known = 0  # the output was removed and built anew: its numbering started again
            for number in range(max(known + 1, 2), numbers[-1] + 1):
                self.events.append((name, number, self._how(meta, number - 1)))
            self.newest[path] = numbers[-1]

    @staticmethod
    def _how(meta: str, before: int) -> str:
        try:
            data = json.loads(fs.read_bytes(fs.join(meta, f"lease-{before:08d}.json")))
        except (FileNotFoundError, ValueError):
            return "?"  # already cleared by a publish, or unreadable
        return "after release" if isinstance(data, dict) and data.get("released") is True else "takeover"

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(OSError):  # an output removed while it was listed
                self.sample()

    def __enter__(self) -> LeaseWatch:
        self.events.clear()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="lease-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


# -- builds ---------------------------------------------------------------------------------------

@dataclass
class BuildLedger:
    """Every build of every output the soak saw, sampled between rounds (when no runner runs).

    A step is published once per life of its output folder (its success record is created only if
    absent), so the success records seen, with the removals the soak itself made, say how many
    times each step was built; a provenance record newer than the success record says that a
    runner built a finished step again (provenance is written just before publishing).
    """

    published: dict[str, set[str]] = field(default_factory=dict)  # step name -> success records seen
    rebuilt_after_done: list[str] = field(default_factory=list)
    attempts: Counter = field(default_factory=Counter)  # step name -> most attempts one build took
    map_tasks: Counter = field(default_factory=Counter)  # "done" | "reused": the dedup's map tasks, every attempt
    _log_lines: set[str] = field(default_factory=set)

    def sample(self, prefix: str) -> None:
        from marin.execution.store.records import StepRecord

        for name, path in outputs(prefix):
            record = StepRecord(path)
            success = record.read_json(record.success)
            if name == DEDUP:
                self._map_tasks(record.log)
            if success is None:
                continue
            finished = success.get("finished_at")
            self.published.setdefault(name, set()).add(repr(finished))
            provenance = record.read_json(record.provenance) or {}
            started = provenance.get("started_at")
            if isinstance(started, int | float) and isinstance(finished, int | float) and started > finished:
                note = f"{name}: provenance of a build started at {started} after it was published at {finished}"
                if note not in self.rebuilt_after_done:
                    self.rebuilt_after_done.append(note)
            if type(provenance.get("attempts")) is int:
                self.attempts[name] = max(self.attempts[name], provenance["attempts"])

    def _map_tasks(self, log: str) -> None:
        try:
            text = fs.read_text(log)
        except FileNotFoundError:
            return
        for line in text.splitlines():
            match = _REUSED_RE.search(line)
            if match and line not in self._log_lines:
                self._log_lines.add(line)
                self.map_tasks["done"] += int(match.group(1))
                self.map_tasks["reused"] += int(match.group(2))


def build_problems(names: list[str], ledger: BuildLedger, removed: Counter) -> list[str]:
    """Steps built other than once plus once per removal ``removed`` counts (by their records)."""
    problems = [f"built again after it was done: {note}" for note in ledger.rebuilt_after_done]
    for name in names:
        published, expected = len(ledger.published.get(name, ())), 1 + removed[name]
        if published != expected:
            problems.append(f"{name}: published {published} times, expected {expected} (1 + {removed[name]} "
                            f"removal(s) by the soak)")
    return problems


def trial_problems(trials: list[str], calls: list[Call], removed: Counter, killed: set[int],
                   killed_runners: set[int]) -> list[str]:
    """Trials whose body ran to the end more often than they were built (or less).

    A body that ended in a process the soak killed, or under a runner it killed (the process may
    have ended before its runner published it), may or may not have been published; every other
    one must have been, and each build needs one.
    """
    problems = []
    for trial in trials:
        ends = [c for c in calls if c.name == trial and c.event == "end"]
        counted = [c for c in ends if c.pid not in killed and c.ppid not in killed_runners
                   and c.gppid not in killed_runners]
        builds = 1 + removed[trial]
        if not len(counted) <= builds <= len(ends):
            problems.append(f"{trial} ran to the end {len(counted)} times outside killed processes and runners "
                            f"(all: {len(ends)}), for {builds} build(s) (1 + removals)")
    return problems
