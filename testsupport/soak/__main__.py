"""Seeded soak test: build a small graph again and again while killing and racing its runners.

``make soak`` (``python -m testsupport.soak``) runs the soak graph (``testsupport/soak/graph.py``: a bundled
corpus -> tokenizer -> tokenized -> nano Llama with checkpoints; an exact-dedup step whose grouping
is zephyr's shuffle on worker processes; a seeded TPE sweep of byte-bigram trials, whose rounds
expand into trials, and the best trial) as real ``marin run`` subprocesses on one prefix, round
after round. Each round does one seeded, logged thing to it: SIGKILL a process of a runner at a
seeded moment, or start two or three runners at once on the same prefix (sometimes killing a
process of one of them, or freezing one: SIGSTOP of the runner and every process under it, past
its leases' expiry, until the other runners took over the steps it held, then SIGCONT, as a
preempted machine comes back; half of the freezes play it as a machine elsewhere, whose step
processes the others can neither see end nor end, so that they must write apart in an attempt
folder).

The processes it kills (:data:`KILL_KINDS`): the runner; a step's process (forked from the
runner's warm template, a fresh interpreter, or its warm accelerator process); a step's whole
process group; the warm template itself (the steps forked from it must end with it); one of the
dedup step's shuffle workers; the runner's warm accelerator process while it trains the model (the
runners state a simulated accelerator, ``v5e-1``, so the model's training runs there). The
moments (:data:`KILL_MOMENTS`): after a random time; after a step process started; just after a
new checkpoint appeared; during the shuffle's map wave (its workers started, or its first new work
file under the dedup output's ``.shuffle/`` appeared, no index yet) or its reduce wave (every map
task committed, its workers run); mid-expansion (this round built a step of the sweep, a round
among them or before them, and what the rounds expanded into is not all built). A round first
removes outputs so that its moment can come (the dedup output for the shuffle's moments, part of
the sweep for mid-expansion, the model for a checkpoint; when the graph is built, a few random
ones, each with a path of the steps reading it up to a target, so that it is needed again).

Then it runs the graph to the end and checks what a researcher relies on:

* every step eventually succeeds, and a second run finds all of them cached (the final run itself,
  when it built nothing);
* the final parameters equal those of a clean run (separate prefix) bit for bit, and every other
  step's files (the dedup's sidecars, the sweep's proposals, trials, results and best) equal the
  clean run's byte for byte; the sweep expanded into the same steps (names and hashes);
* nothing was built twice: each step was published once, plus once per removal the soak made
  (success records seen between rounds), no finished step was built again (a provenance record
  newer than its success record), and each trial's body ran to the end once per build, but for
  calls the soak killed (the trial counts its calls);
* no lease is left live under the prefix, and of each step's lease files only the newest is left;
* every step that claims success has all files of its manifest with matching checksums
  (and ``marin verify`` agrees);
* no temporary file is left visible as a shard or a checkpoint;
* no runner ended in a way the round does not explain (a traceback, a hang, a process that
  outlived the process it was started by when that was killed); a revived runner ends well,
  taking the steps it lost as built by another runner.

It prints how many kills of each kind and at each moment it survived (and where the shuffle's
and the expansion's kills landed), how many freezes (and how many of the frozen runners' leases
were taken over while they were frozen, how many of their steps by a holder writing apart), races, how often a step's lease was taken again (a takeover
from a dead or expired holder, or after a release), how often a runner waited for another's
lease, and how many of the dedup's map tasks a retry reused; it exits 1 when any check fails.
Options: ``--seed``, ``--rounds``, ``--workdir`` (kept for inspection), ``--prefix`` (``local``:
a folder of the workdir; ``gs``: a bucket on a fake-gcs-server the soak starts, which enforces
the store's preconditions as GCS does), ``--faults RATE`` (with ``gs``: the runners reach the
store through a proxy that fails that share of their requests, every kind of
:class:`testsupport.faults.FaultKind` among them; at the end one line ``fault <kind>: <count>``
per kind, before the verdict, and every fault with the request it hit in ``<workdir>/faults.log``),
``--nodes N`` (the runners on the N nodes of a local multi-node Ray cluster, racing runners on
different nodes, :mod:`testsupport.soak.nodes`; 3 by default with ``--faults``), ``--graph``
(``full``, or ``small``: the corpus and its tokenizer only, for a short run), ``--train-steps N`` (the
full graph's model trains N steps, 48 by default: fewer for a short soak whose kills land elsewhere).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rigging import filesystem as fs
from rigging.process import running
from testsupport.leases import place_elsewhere
from testsupport.soak import observe as seen
from testsupport.soak.graph import (
    CALLS_ENV,
    DEDUP,
    MODEL,
    SAVE_EVERY,
    SMALL_TARGETS,
    SWEEP,
    TARGETS,
    TRAIN_STEPS,
    TRAIN_STEPS_ENV,
    read_calls,
    small_steps,
    steps,
)
from testsupport.soak.stores import Stores, open_stores

if TYPE_CHECKING:
    from testsupport.soak.nodes import SoakNodes

NODE_ENV = "FRAY_TEST_NODE"  # testsupport.ray_cluster's: set on a node's processes to its name

ROOT = Path(__file__).resolve().parents[2]
GRAPH_FILE = Path(__file__).resolve().with_name("graph.py")  # the module imported above as .graph
KILL_KINDS = ("runner", "step", "step-group", "template", "shuffle-worker", "warm-accelerator")
"""What a kill round may SIGKILL: the runner; one step process; a step's whole process group; the
runner's warm template (fray.pool), which every step forked from it must follow; one of the
dedup step's zephyr workers (drawn only at the shuffle's moments); the runner's warm accelerator
process (fray.warm_process: drawn only at a checkpoint's moment, while it trains the model)."""
_ONLY_AT = {"shuffle-worker": ("shuffle-map", "shuffle-reduce"), "warm-accelerator": ("checkpoint",)}
"""The kinds drawn only at some moments (the others at every moment)."""
ACCELERATOR_ENV = {"MARIN_ACCELERATOR": "v5e-1"}
"""What every local runner of the soak is told of its host (its lock file is the workdir's): the
model's training is an accelerator step, run in the runner's warm accelerator process."""
KILL_MOMENTS = ("time", "step-start", "checkpoint", "shuffle-map", "shuffle-reduce", "mid-expansion")
"""When a kill round kills (see the module docstring)."""
_MOMENT_DRAW = ("time", "time", "step-start", "checkpoint", "shuffle-map", "shuffle-reduce", "mid-expansion")
_SMALL_MOMENT_DRAW = ("time", "time", "step-start")
"""The moments of the small graph (``--graph small``: no checkpoint, shuffle nor sweep)."""


@dataclass(frozen=True)
class Graph:
    """Which of the soak's graphs it builds (``--graph``)."""

    attr: str
    """Its function in :mod:`testsupport.soak.graph` (what ``marin run graph.py:<attr>`` builds)."""
    targets: tuple[str, ...]
    moments: tuple[str, ...]

    def steps(self) -> list:
        return (steps if self.attr == "steps" else small_steps)()


GRAPHS = {"full": Graph("steps", TARGETS, _MOMENT_DRAW), "small": Graph("small_steps", SMALL_TARGETS, _SMALL_MOMENT_DRAW)}
LEASE_TTL_S = 10.0
"""The soak's runners take leases of this many seconds (``MARIN_LEASE_TTL``): a frozen runner's
steps are taken over within a round, not after the default minute."""
_FREEZE_SHARE = 0.4
"""Of the races with a kill, the share that freeze a runner instead."""
_ELSEWHERE_SHARE = 0.5
"""Of the freezes, the share played as a machine elsewhere: the steps the frozen runner holds name
their process as one of another host, which the runners taking them over cannot end; they must
write apart (an attempt folder), and the revived processes write on until their watches end them."""


# -- bookkeeping ----------------------------------------------------------------------------------

@dataclass
class Tally:
    """What the soak did and what it saw."""

    rounds: int = 0
    kills: Counter = field(default_factory=Counter)  # a kind of KILL_KINDS -> count
    moments: Counter = field(default_factory=Counter)  # a moment of KILL_MOMENTS -> kills at it
    landed: Counter = field(default_factory=Counter)  # (moment, what was seen when it killed) -> count
    races: int = 0
    racers: int = 0
    freezes: int = 0
    frozen_leases: int = 0  # leases the frozen runners held when they were frozen
    frozen_taken_over: int = 0  # of those, taken over (or published) by another runner while frozen
    frozen_elsewhere: int = 0  # freezes played as another host's machine
    placed_elsewhere: int = 0  # running steps of those whose process was named as another host's
    taken_apart: int = 0  # of those steps, taken over by a holder that wrote in an attempt folder
    written_apart: int = 0  # published builds, at the end, whose files are in an attempt folder
    resumed_from_checkpoint: int = 0
    leases_taken_again: Counter = field(default_factory=Counter)  # ("takeover" | "after release" | "?", step)
    waits: int = 0  # "[wait]" lines: a runner found another holding a step's lease
    built_by_another: int = 0  # steps a runner took as "built by another runner"
    on_node: Counter = field(default_factory=Counter)  # node -> runners started on it (--nodes)
    attempt_folders_left: int = 0  # .attempts/<n>/ folders no record names, at the end
    races_across_nodes: int = 0  # races whose runners ran on more than one node
    unexpected: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def total_kills(self) -> int:
        return sum(self.kills.values())


class Log:
    """Every action, timestamped from the start, to stdout and ``<workdir>/soak.log``."""

    def __init__(self, path: Path):
        self.start = time.monotonic()
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def __call__(self, message: str) -> None:
        line = f"[{time.monotonic() - self.start:7.2f}s] {message}"
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


@dataclass
class Runner:
    """One ``marin run`` subprocess of a round."""

    tag: str
    proc: Any
    """Its process: a ``subprocess.Popen``, or a :class:`testsupport.soak.nodes.NodeProcess` on a node."""
    output: Path
    node: str | None = None
    """The node of the Ray cluster it runs on (``--nodes``), None for this host."""
    killed: bool = False  # we SIGKILLed the runner itself
    frozen: bool = False  # we froze it (SIGSTOP) and revived it (SIGCONT)
    step_killed: bool = False  # we SIGKILLed one of its step processes, their group, its template or a worker


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARIN_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def start_runner(prefix: str, output: Path, tag: str, env: dict[str, str], *, graph: str = "steps",
                 nodes: SoakNodes | None = None, node: str | None = None) -> Runner:
    """``marin run testsupport/soak/graph.py:<graph> --prefix P`` in the workspace, output to a file;
    on ``node`` of ``nodes`` when given (started there by a Ray task), else as a child of this process."""
    output.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "marin.cli.main", "run", f"{GRAPH_FILE}:{graph}", "--prefix", prefix]
    if nodes is not None and node is not None:
        proc: Any = nodes.start(node, command, _env({**env, NODE_ENV: node}), str(ROOT), output)
        return Runner(tag, proc, output, node)
    out = open(output, "wb")  # noqa: SIM115 - the child holds it; closed below
    proc = subprocess.Popen(command, cwd=ROOT, env=_env(env), stdout=out, stderr=subprocess.STDOUT)
    out.close()
    return Runner(tag, proc, output)


def _wait_until(condition: Callable[[], bool], timeout: float, runners: list[Runner], interval: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):  # an output folder removed or replaced while it was read
            if condition():
                return True
        if all(r.proc.poll() is not None for r in runners):
            return False
        time.sleep(interval)
    return False


def _why_not(runners: list[Runner], timeout: float) -> str:
    """Why a wait of :func:`_wait_until` gave up (for the log)."""
    return "the runners ended" if all(r.proc.poll() is not None for r in runners) else f"waited {timeout:.0f}s"


class Soak:
    """The rounds, the final run and the checks."""

    def __init__(self, workdir: Path, seed: int, log: Log, stores: Stores, *, graph: Graph = GRAPHS["full"],
                 nodes: SoakNodes | None = None):
        self.workdir = workdir
        self.prefix = stores.soak
        self.clean_prefix = stores.clean
        self.env = stores.env
        self.envs = {stores.soak: stores.env, stores.clean: stores.clean_env}
        self.graph = graph
        self.nodes = nodes
        # Which node each runner goes to: a stream of its own, so that the rounds' draws are the
        # same with and without nodes.
        self.node_rng = random.Random(f"nodes-{seed}")
        # Each prefix's trials count their calls in a file of their own.
        self.calls = {stores.soak: str(workdir / "calls-soak.txt"), stores.clean: str(workdir / "calls-clean.txt")}
        self.rng = random.Random(seed)
        # Whether a race freezes rather than kills: a stream of its own, so that a seed's rounds up to
        # its first freeze (all of them, for a seed that draws none) are what they were before
        # freezes were added; a freeze's own draws (its moment, its victim, when it is revived) come
        # from the main stream, so the rounds after it differ.
        self.freeze_rng = random.Random(f"freeze-{seed}")
        self.log = log
        self.tally = Tally()
        self.leases = seen.LeaseWatch(self.prefix)
        self.ledger = seen.BuildLedger()
        self.removed: Counter = Counter()  # step name -> times the soak removed its output
        self.killed_pids: set[int] = set()  # every process the soak killed, or that was under one it killed
        self.killed_runners: set[int] = set()  # the runners the soak killed
        self.runners: list[Runner] = []
        self.completed: Runner | None = None  # the last runner of run_to_completion that ended well
        # The runners' temporary folder: what killed processes leave there is counted at the end.
        self.tmp = workdir / "tmp"
        self.tmp.mkdir(exist_ok=True)

    def _runner(self, round_no: int, tag: str, prefix: str | None = None, node: str | None = None) -> Runner:
        prefix = prefix or self.prefix
        # On Ray nodes steps run as Ray tasks: there, no host accelerator is stated.
        accelerator = {**ACCELERATOR_ENV, "MARIN_ACCELERATOR_LOCK": str(self.workdir / "libtpu_lockfile")} \
            if node is None else {}
        runner = start_runner(prefix, self.workdir / "logs" / f"r{round_no:03d}-{tag}.txt", tag,
                              {**self.envs[prefix], CALLS_ENV: self.calls[prefix], "TMPDIR": str(self.tmp),
                               "MARIN_LEASE_TTL": str(LEASE_TTL_S), **accelerator}, graph=self.graph.attr,
                              nodes=self.nodes, node=node)
        self.runners.append(runner)
        if node is not None:
            self.tally.on_node[node] += 1
        self.log(f"  start runner {tag} (pid {runner.proc.pid}{f', node {node}' if node else ''})")
        return runner

    def _place(self, count: int) -> list[str | None]:
        """The nodes ``count`` runners of a round go to: each on another node while there are enough."""
        if self.nodes is None:
            return [None] * count
        names = self.nodes.names
        if count <= len(names):
            return list(self.node_rng.sample(names, count))
        return [self.node_rng.choice(names) for _ in range(count)]

    def stop_runners(self) -> None:
        """End every runner still running (the soak was interrupted); their steps follow them."""
        for r in self.runners:
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()

    # -- killing ---------------------------------------------------------------------------------
    def _wait_for(self, moment: str, runners: list[Runner]) -> str:
        """Wait for ``moment`` (seeded delays); returns what it waited for (for the log)."""
        if moment == "time":
            delay = self.rng.uniform(0.3, 12.0)
            _wait_until(lambda: False, delay, runners)
            return f"after {delay:.2f}s"
        if moment == "step-start":
            delay = self.rng.uniform(0.0, 4.0)
            # Every 50 ms, not the default 10: each look lists every process of the host (psutil),
            # a few milliseconds each, and the kill comes up to 4 s after the step started anyway.
            if not _wait_until(lambda: any(seen.step_processes(r.proc.pid) for r in runners), 60, runners,
                               interval=0.05):
                return f"when no step had started ({_why_not(runners, 60)})"
            _wait_until(lambda: False, delay, runners)
            return f"{delay:.2f}s after a step process started"
        if moment == "checkpoint":
            before = seen.checkpoint_entries(self.prefix, MODEL)
            delay = self.rng.uniform(0.0, 0.25)
            if not _wait_until(lambda: bool(seen.checkpoint_entries(self.prefix, MODEL) - before), 90, runners,
                               interval=0.02):
                return f"when no new checkpoint had appeared ({_why_not(runners, 90)})"
            _wait_until(lambda: False, delay, runners)
            return f"{delay:.3f}s after a new checkpoint entry appeared"
        if moment in ("shuffle-map", "shuffle-reduce"):
            phase = moment.removeprefix("shuffle-")
            # The map wave from its workers' start, or from its first new work file (its tasks
            # commit a fraction of a second apart: a short delay lands between them); the reduce
            # wave once the index says every map task committed and its workers run. Work files
            # a killed attempt left count only once this round's attempt changes them.
            files = phase == "map" and self.rng.random() < 0.5
            delay = self.rng.uniform(0.0, 0.15 if files else 0.4 if phase == "map" else 0.3)
            baseline: list[set[str]] = []

            def reached() -> bool:
                pid = self._running_dedup(runners)
                if pid is None:
                    return False
                names = seen.shuffle_files(self.prefix)
                if files:
                    if not baseline:
                        baseline.append(names)
                    return bool(names - baseline[0])
                workers = any(seen.shuffle_workers(r.proc.pid) for r in runners)
                return workers and (seen.INDEX_FILE in {n.rsplit("/", 1)[-1] for n in names}) == (phase == "reduce")

            if not _wait_until(reached, 120, runners, interval=0.03):
                return f"when the shuffle's {phase} wave had not come ({_why_not(runners, 120)})"
            _wait_until(lambda: False, delay, runners)
            return f"{delay:.3f}s after the shuffle's {phase} wave {'wrote' if files else 'started'}"
        delay = self.rng.uniform(0.0, 0.4)  # what a round expands into is built within a second or two
        # Once this round's runners build a step of the sweep and its expansion is still to build
        # (a round, or a trial of a round built earlier): what a round left built counts only then.
        before = set(seen.expansion_state(self.prefix)[1])

        def progressed() -> bool:
            state, built = seen.expansion_state(self.prefix)
            return state == "mid" and bool(set(built) - before)

        if not _wait_until(progressed, 120, runners, interval=0.02):
            return f"when no step of the sweep was built before its expansion was ({_why_not(runners, 120)})"
        _wait_until(lambda: False, delay, runners)
        return f"{delay:.2f}s after a step of the sweep was built, mid-expansion"

    def _running_dedup(self, runners: list[Runner]) -> int | None:
        """The pid of the dedup step's process, while one of ``runners`` runs it."""
        path = seen.output_folder(self.prefix, DEDUP)
        pid = seen.running_pid(path) if path else None
        if pid is None or not any(pid in {p.pid for p in seen.step_processes(r.proc.pid)} for r in runners):
            return None
        return pid

    def _landed(self, moment: str, runners: list[Runner]) -> tuple[str, str]:
        """Where the graph stands now, at ``moment``'s kill: (a key to count, words for the log)."""
        if moment.startswith("shuffle-"):
            state = seen.shuffle_state(self.prefix)
            workers = sum(len(seen.shuffle_workers(r.proc.pid)) for r in runners)
            key = ("map starting" if state.phase == "none" and workers
                   else f"map with {state.commits} committed" if state.phase == "map" else state.phase)
            return key, f"shuffle: {state}, {workers} worker(s)"
        if moment == "mid-expansion":
            state, built = seen.expansion_state(self.prefix)
            return state, f"sweep {state}: built {', '.join(built) or 'nothing'}"
        return moment, ""

    def _preferred_pids(self, moment: str) -> set[int]:
        """The step processes a kill at ``moment`` is about (their status records name them)."""
        if moment.startswith("shuffle-"):
            names = [DEDUP]
        elif moment == "mid-expansion":
            names = [n for n, _path in seen.outputs(self.prefix) if n.startswith(SWEEP + "/")]
        elif moment == "checkpoint":
            names = [MODEL]
        else:
            return set()
        pids = set()
        for name in names:
            path = seen.output_folder(self.prefix, name)
            pid = seen.running_pid(path) if path else None
            if pid is not None:
                pids.add(pid)
        return pids

    def _targets(self, what: str, victim: Runner, moment: str) -> list:
        if what == "template":
            return seen.templates(victim.proc.pid)
        if what == "shuffle-worker":
            return seen.shuffle_workers(victim.proc.pid)
        if what == "warm-accelerator":
            return seen.warm_accelerator_processes(victim.proc.pid)
        found = seen.step_processes(victim.proc.pid)
        preferred = self._preferred_pids(moment)
        return [p for p in found if p.pid in preferred] or found

    def _kill(self, runners: list[Runner], victim: Runner, moment: str) -> None:
        import psutil

        kinds = tuple(k for k in KILL_KINDS if moment in _ONLY_AT.get(k, (moment,)))
        what = self.rng.choice(kinds)
        when = self._wait_for(moment, runners)
        if victim.proc.poll() is not None:
            self.log(f"  no kill: runner {victim.tag} already exited ({victim.proc.returncode}) [{when}]")
            return
        landed, where = self._landed(moment, runners)
        when += f" ({where})" if where else ""
        workers = self._targets(what, victim, moment) if what != "runner" else []
        if what != "runner" and not workers:
            when += f" (drew {what}, but no such process was running)"
            what = "runner"  # between steps (or before its first): nothing else to kill
        if what == "runner":
            descendants = []
            with contextlib.suppress(psutil.NoSuchProcess):
                descendants = psutil.Process(victim.proc.pid).children(recursive=True)
            self.killed_pids |= {victim.proc.pid, *(p.pid for p in descendants)}
            self.killed_runners.add(victim.proc.pid)
            victim.proc.send_signal(signal.SIGKILL)
            victim.killed = True
            self._count(what, moment, landed)
            self.log(f"  KILL runner {victim.tag} (pid {victim.proc.pid}) {when}")
            # Its step processes must not outlive it: they would write into an output that the
            # next runner takes over (fray's watchdog ends them within a fraction of a second).
            self._must_end(descendants, f"killed runner {victim.tag}")
            return
        victim.step_killed = True
        under = None
        for _ in range(3):  # a step of a few hundred milliseconds may end before the signal: another
            worker = self.rng.choice(workers)
            try:
                under = self._signal(what, worker, victim)
                break
            except (ProcessLookupError, psutil.NoSuchProcess):
                self.log(f"  {what} process {worker.pid} of {victim.tag} already gone")
                workers = [w for w in self._targets(what, victim, moment) if w.pid != worker.pid]
                if not workers:
                    break
        if under is None:
            self.log(f"  no kill: no {what} process of {victim.tag} left [{when}]")
            victim.step_killed = False
            return
        self._count(what, moment, landed)
        self.log(f"  KILL {what} {worker.pid} of runner {victim.tag} {when}"
                 + (f" (with {len(under)} process(es) under it)" if under else ""))
        self._must_end(under, f"killed {what} {worker.pid} of {victim.tag}")

    def _freeze(self, runners: list[Runner], victim: Runner, moment: str) -> None:
        """Freeze ``victim`` and everything under it (SIGSTOP) at ``moment``, keep it frozen past its
        leases' expiry until the other runners took over (or published) every step it held, then
        revive it (SIGCONT: its processes first, the runner last, the worst order a revived machine
        can give)."""
        import psutil

        when = self._wait_for(moment, runners)
        if victim.proc.poll() is not None:
            self.log(f"  no freeze: runner {victim.tag} already exited ({victim.proc.returncode}) [{when}]")
            return
        try:
            tree = [psutil.Process(victim.proc.pid), *psutil.Process(victim.proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            self.log(f"  no freeze: runner {victim.tag} already exited [{when}]")
            return
        for p in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.suspend()
        # Bodies under it may have ended without being published: counted as under a killed runner.
        self.killed_runners.add(victim.proc.pid)
        self.killed_pids |= {p.pid for p in tree}
        held = seen.leases_held_by(self.prefix, victim.proc.pid)
        victim.frozen = True
        self.tally.freezes += 1
        self.tally.frozen_leases += len(held)
        # Its own stream, as whether to freeze: the main stream's draws stay those of a plain freeze.
        elsewhere = self.freeze_rng.random() < _ELSEWHERE_SHARE
        placed = [n for n, (path, _t) in sorted(held.items()) if elsewhere and place_elsewhere(path)]
        self.tally.frozen_elsewhere += elsewhere
        self.tally.placed_elsewhere += len(placed)
        self.log(f"  FREEZE runner {victim.tag} (pid {victim.proc.pid}, {len(tree)} processes) {when}, holding "
                 f"{', '.join(f'{n} (lease {t})' for n, (_p, t) in sorted(held.items())) or 'no lease'}"
                 + (f"; as a machine elsewhere, its running step(s) {', '.join(placed) or 'none'} "
                    "named as another host's" if elsewhere else ""))
        others = [r for r in runners if r is not victim]
        started = time.monotonic()
        _wait_until(lambda: False, LEASE_TTL_S + 1.0, others)  # past every lease it held
        if held:
            _wait_until(lambda: all(seen.moved_on(path, token) for path, token in held.values()), 120, others,
                        interval=0.05)
        taken = [n for n, (path, token) in held.items() if seen.moved_on(path, token)]
        self.tally.frozen_taken_over += len(taken)
        _wait_until(lambda: False, self.rng.uniform(0.0, 1.0), others)
        # A new holder names its attempt folder once its step has started (after copying what to resume from).
        _wait_until(lambda: all(seen.written_apart(held[n][0]) for n in placed if n in taken), 10.0, others)
        apart = [n for n in placed if n in taken and seen.written_apart(held[n][0])]
        self.tally.taken_apart += len(apart)
        for p in reversed(tree):
            with contextlib.suppress(psutil.NoSuchProcess):
                p.resume()
        self.log(f"  REVIVE runner {victim.tag} after {time.monotonic() - started:.1f}s frozen; "
                 f"{len(taken)} of its {len(held)} lease(s) taken over meanwhile"
                 + (f" ({', '.join(sorted(taken))})" if taken else "")
                 + (f"; {len(apart)} of its {len(placed)} step(s) placed elsewhere written apart by their new holder"
                    if placed else ""))

    def _signal(self, what: str, worker: Any, victim: Runner) -> list | None:
        """SIGKILL ``worker`` (its group, for ``step-group``); returns the processes that were
        under it (they must end with it), or None when it must not be killed."""
        # Everything under it must end with it: forked steps (template), zephyr's workers (step).
        under = worker.children(recursive=True)
        pids = seen.tree_pids(worker)
        if what == "step-group":
            group = os.getpgid(worker.pid)
            if group in (os.getpgrp(), os.getpgid(victim.proc.pid)):
                # Never the soak's (or the runner's) own group: a step must lead a group of its own.
                self.tally.unexpected.append(f"step process {worker.pid} of {victim.tag} shares group {group}")
                return None
            self.killed_pids |= pids
            os.killpg(group, signal.SIGKILL)
        else:
            self.killed_pids |= pids
            worker.send_signal(signal.SIGKILL)
        return under

    def _count(self, what: str, moment: str, landed: str) -> None:
        self.tally.kills[what] += 1
        self.tally.moments[moment] += 1
        self.tally.landed[moment, landed] += 1

    def _must_end(self, processes: list, after: str) -> None:
        """``processes`` (all under one that was killed) end within 5 s (fray's watchdogs end them)."""
        import psutil

        if not processes:
            return
        _, alive = psutil.wait_procs(processes, timeout=5)
        alive = [p for p in alive if p.is_running() and running(p.pid)]
        if alive:
            self.tally.unexpected.append(f"processes {[p.pid for p in alive]} outlived {after}")
            for p in alive:
                p.kill()

    # -- rounds ----------------------------------------------------------------------------------
    def _finish_round(self, runners: list[Runner], timeout: float = 240.0) -> None:
        for r in runners:
            try:
                r.proc.wait(timeout=max(1.0, timeout))
            except subprocess.TimeoutExpired:
                self.tally.unexpected.append(f"runner {r.tag} hung for {timeout:.0f}s (see {r.output})")
                r.proc.kill()
                r.proc.wait()
            self._judge(r)

    def _judge(self, r: Runner) -> None:
        rc = r.proc.returncode
        text = r.output.read_text(errors="replace")
        verdict = "ok"
        if r.killed:
            verdict = "killed"
        elif r.frozen and rc == 0 and "Traceback" not in text:
            verdict = "ok after it was frozen and revived"
        elif "Traceback" in text:
            verdict = "UNEXPECTED traceback"
        elif rc == 0:
            verdict = "ok"
        elif rc == 1 and r.step_killed and "failed: soak/" in text:
            verdict = "step failed as killed"
        else:
            verdict = f"UNEXPECTED exit {rc}"
        if verdict.startswith("UNEXPECTED"):
            tail = " | ".join(text.strip().splitlines()[-4:])
            self.tally.unexpected.append(f"runner {r.tag}: {verdict}: {tail} (see {r.output})")
        if "resuming from checkpoint" in text.lower() or "restored checkpoint" in text.lower():
            self.tally.resumed_from_checkpoint += 1
        self.tally.waits += text.count("[wait]")
        self.tally.built_by_another += text.count("built by another runner")
        self.log(f"  runner {r.tag} exit {rc}: {verdict}")

    def _remove(self, paths: dict[str, str], why: str) -> None:
        for name, path in paths.items():
            fs.rm_tree(path)
            self.removed[name] += 1
        if paths:
            self.log(f"  {why}: removed {', '.join(sorted(paths))}")

    def _make_work(self, moment: str | None) -> None:
        """Remove outputs so that the round has work, and its kill's moment can come."""
        built = {name: path for name, path in seen.outputs(self.prefix) if seen.is_done(path)}
        if moment in ("shuffle-map", "shuffle-reduce"):
            self._remove({n: p for n, p in built.items() if n == DEDUP}, "for the shuffle")
            return
        if moment == "checkpoint":
            self._remove({n: p for n, p in built.items() if n == MODEL}, "for a checkpoint")
            return
        if moment == "mid-expansion":
            state, _ = seen.expansion_state(self.prefix)
            if state != "built":
                return
            sweep = {n: p for n, p in built.items() if n.startswith(SWEEP + "/")}
            trials = sorted(n for n in sweep if "/trial-" in n)
            how = self.rng.choice(["head", "tail", "trials"])
            if how == "head":  # round-0 and a trial: its expansion is built again, one trial of it anew
                chosen = [f"{SWEEP}/round-0", self.rng.choice(trials)]
            elif how == "tail":  # the last round and everything it expanded into
                chosen = [n for n in sweep if n.rsplit("/", 1)[1] in ("round-1", "trial-2", "trial-3")]
            else:  # trials only: the rounds stay built, their expansion is not
                chosen = self.rng.sample(trials, self.rng.choice([1, 2]))
            chosen += [f"{SWEEP}/results", f"{SWEEP}/best"]
            self._remove({n: sweep[n] for n in chosen if n in sweep}, f"for mid-expansion ({how})")
            return
        from marin.execution.plan.make import make_plan
        from marin.execution.store.store import StepStore

        plan = make_plan(self.graph.steps(), StepStore(self.prefix), explain=False)
        planned = sorted(p.name for p in plan.steps)
        # Not all built (by name: outputs of trials a sweep round expanded into earlier stay on disk
        # while the round itself is not built, and its plan does not have them yet).
        if any(name not in built for name in planned):
            return
        k = self.rng.choice([1, 1, 2, len(plan.steps)])
        # A step is rebuilt only when something to build needs it: with each chosen step goes a
        # path of steps reading it, up to a target (Make-style, a removed intermediate whose
        # readers are built is left unbuilt).
        readers = _readers(plan)
        chosen = set()
        for name in self.rng.sample(planned, k):
            chosen.add(name)
            while name not in self.graph.targets:
                name = self.rng.choice(sorted(readers[name]))
                chosen.add(name)
        self._remove({n: built[n] for n in chosen}, "graph already built")

    def round(self, n: int) -> None:
        self.tally.rounds += 1
        kind = self.rng.choice(["kill", "kill", "race"])
        racers, kill = (1, True) if kind == "kill" else (self.rng.choice([2, 3]), self.rng.random() < 0.6)
        moment = self.rng.choice(self.graph.moments) if kill else None
        self._make_work(moment)
        with self.leases:
            self._round(n, racers, moment)
        for step, number, how in self.leases.events:
            self.tally.leases_taken_again[how, step] += 1
            self.log(f"  {step}: lease {number} taken ({how})")
        self.ledger.sample(self.prefix)

    def _round(self, n: int, racers: int, moment: str | None) -> None:
        if racers == 1:
            self.log(f"round {n}: one runner, one kill at {moment}")
            runner = self._runner(n, "a", node=self._place(1)[0])
            self._kill([runner], runner, moment or "time")
            self._finish_round([runner])
            return
        self.log(f"round {n}: race of {racers} runners{f' with a kill at {moment}' if moment else ''}")
        self.tally.races += 1
        self.tally.racers += racers
        runners = []
        places = self._place(racers)
        self.tally.races_across_nodes += len({p for p in places if p is not None}) > 1
        for i in range(racers):
            runners.append(self._runner(n, "abc"[i], node=places[i]))
            time.sleep(self.rng.uniform(0.0, 0.3))
        if moment:
            freeze = self.freeze_rng.random() < _FREEZE_SHARE
            victim = self.rng.choice(runners)
            (self._freeze if freeze else self._kill)(runners, victim, moment)
        self._finish_round(runners)

    def run_to_completion(self, prefix: str, label: str) -> bool:
        for attempt in range(1, 4):
            self.log(f"{label}: run to completion, attempt {attempt}")
            # The soak's final runs on a node too; the clean reference run on this host.
            runner = self._runner(0, f"{label}-{attempt}", prefix, node=self._place(1)[0] if prefix == self.prefix else None)
            self._finish_round([runner], timeout=300)
            if runner.proc.returncode == 0:
                self.completed = runner
                return True
        self.tally.failures.append(f"{label}: the graph did not complete in 3 runs without kills")
        return False

    # -- checks ----------------------------------------------------------------------------------
    def check(self) -> None:
        from marin.execution.plan.make import make_plan
        from marin.execution.store.records import StepRecord
        from marin.execution.store.store import StepStore

        fail = self.tally.failures.append
        self.ledger.sample(self.prefix)
        plan = make_plan(self.graph.steps(), StepStore(self.prefix), explain=False)
        clean_plan = make_plan(self.graph.steps(), StepStore(self.clean_prefix), explain=False)
        # 1. Every step succeeded, and a rerun is a no-op.
        for p in plan.steps:
            if not StepRecord(p.output_path).is_done():
                fail(f"{p.output_name}: not done at the end")
        final = self.completed
        if final is not None and _all_cached(final, len(plan.steps)):
            # The final run built nothing: it was itself a rerun after the soak, all cached (a second
            # one would cost a runner and prove nothing more).
            self.log(f"rerun: the final run found all {len(plan.steps)} steps cached")
        else:
            cached = self._runner(0, "rerun", node=self._place(1)[0])
            self._finish_round([cached])
            if not _all_cached(cached, len(plan.steps)):
                fail(f"a rerun after the soak was not all cached (see {cached.output})")
        # 2. The same steps as the clean run, their outputs bit for bit equal.
        ours = {p.name: p for p in plan.steps}
        theirs = {p.name: p for p in clean_plan.steps}
        if {n: p.hash for n, p in ours.items()} != {n: p.hash for n, p in theirs.items()}:
            fail(f"the plans differ from the clean run's: {sorted(set(ours) ^ set(theirs))} "
                 f"{sorted(n for n in set(ours) & set(theirs) if ours[n].hash != theirs[n].hash)}")
        expansion = sorted(n for n in ours if n.startswith(SWEEP + "/"))
        if expansion:
            self.log(f"sweep: expanded into the clean run's {len(expansion)} steps, names and hashes "
                     f"({', '.join(n.removeprefix(SWEEP + '/') for n in expansion)})"
                     if all(n in theirs and theirs[n].hash == ours[n].hash for n in expansion)
                     else "sweep: expanded into OTHER steps than the clean run's")
        for name in sorted(set(ours) & set(theirs)):
            # Where each build's files are (an attempt folder, when its records name one).
            mine, clean = (StepRecord(x[name].output_path).files_folder() for x in (ours, theirs))
            if name == MODEL:
                self._compare_params(mine, clean)
            else:
                self._compare_files(name, mine, clean)
        # 3. Nothing built twice.
        self._check_builds(sorted(ours))
        # 4. No lease left live, 5. manifests hold, 6. no temporary file visible.
        self._check_outputs()
        left = Counter(name.rsplit("-", 1)[0] + "-" for name in os.listdir(self.tmp))  # mkdtemp's prefixes
        self.log(f"note: left in the runners' temporary folder: {', '.join(f'{n} {k}*' for k, n in sorted(left.items()))}"
                 if left else "note: nothing left in the runners' temporary folder")

    def _compare_files(self, name: str, ours: str, theirs: str) -> None:
        a, b = _manifest_digests(ours), _manifest_digests(theirs)
        differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        # Shard commit records, sweep results and best.json name folders under each prefix.
        differ = [k for k in differ if k not in a or k not in b or not _same_but_prefix(
            fs.join(ours, k), fs.join(theirs, k), self.prefix, self.clean_prefix)]
        if differ:
            self.tally.failures.append(f"{name}: files differ from the clean run: {differ[:5]}")
        elif name == DEDUP:
            self.log(f"{DEDUP}: {len(a)} files (sidecars, summary) byte for byte equal to the clean run")

    def _check_builds(self, names: list[str]) -> None:
        trials = [n for n in names if n.startswith(f"{SWEEP}/trial-")]
        clean = read_calls(self.calls[self.clean_prefix])
        ours = read_calls(self.calls[self.prefix])
        problems = [f"clean: {p}" for p in seen.trial_problems(trials, clean, Counter(), set(), set())]
        problems += seen.build_problems(names, self.ledger, self.removed)
        problems += seen.trial_problems(trials, ours, self.removed, self.killed_pids, self.killed_runners)
        self.tally.failures.extend(problems)
        ended = sum(1 for c in ours if c.event == "end")
        self.log(f"trials: {ended} calls ran to the end, {len(ours) - 2 * ended} were cut short; "
                 f"{sum(self.removed[t] for t in trials)} trial output(s) removed by the soak")
        self.log(f"builds: every step published once plus once per removal ({sum(self.removed.values())} "
                 f"removals); most attempts of one build: {max(self.ledger.attempts.values(), default=0)}"
                 if not problems else "builds: SOME STEP WAS BUILT TWICE (see below)")

    def _check_outputs(self) -> None:
        from marin.execution.store.gc import find_outputs
        from marin.execution.store.layout import ATTEMPTS_DIR
        from marin.execution.store.records import StepRecord
        from marin.execution.store.store import StepStore
        from marin.execution.store.verify import verify_output
        from rigging.lease import current_lease

        fail = self.tally.failures.append
        store = StepStore(self.prefix)
        leftover_meta_tmp = 0
        for folder in sorted(find_outputs(store)):
            path = fs.join(store.prefix, folder)
            meta = fs.join(path, ".marin")
            leases = [n for n in fs.listdir(meta) if n.startswith("lease-")]
            info = current_lease(meta)
            if len(leases) > 1 or (info is not None and not info.released):
                fail(f"{folder}: lease files left: {leases} (newest: {info})")
            check = verify_output(folder, path)
            if check.verdict.is_problem or check.verdict.value == "not built":
                fail(f"{folder}: {check.verdict.value}: {check.problems[:3]}")
            files_folder = StepRecord(path).files_folder()
            self.tally.written_apart += files_folder != path
            # Attempt folders no record names: what a taken-over attempt that wrote apart left (marin gc's).
            attempts = [fs.join(path, ATTEMPTS_DIR, n) for n in fs.listdir(fs.join(path, ATTEMPTS_DIR))]
            self.tally.attempt_folders_left += sum(1 for a in attempts if a != files_folder)
            for rel, _size in fs.walk_files(files_folder):
                parts = rel.split("/")
                if parts[0] == seen.WORK_FOLDER:
                    fail(f"{folder}: shuffle work file left: {rel}")
                if any(".tmp-" in n or "orbax-checkpoint-tmp" in n or n.endswith((".tmp", ".partial")) for n in parts):
                    if parts[0] == ".marin":
                        leftover_meta_tmp += 1
                    else:
                        fail(f"{folder}: temporary file left visible: {rel}")
            self._check_listings(folder, files_folder)
        if leftover_meta_tmp:
            self.log(f"note: {leftover_meta_tmp} temporary record file(s) left inside .marin/ folders")
        self.log(f"attempt folders no record names: {self.tally.attempt_folders_left}"
                 + (" (left by takeovers from a machine elsewhere; `marin gc` removes them)"
                    if self.tally.attempt_folders_left else ""))
        # Straight to the emulator, as every look of the soak's own: the verdict is not itself faulted.
        verify = subprocess.run([sys.executable, "-m", "marin.cli.main", "verify", f"{GRAPH_FILE}:{self.graph.attr}",
                                 "--prefix", self.prefix], cwd=ROOT, env=_env(self.envs[self.clean_prefix]),
                                capture_output=True,
                                text=True, timeout=120)
        self.log("marin verify: " + " | ".join(verify.stdout.strip().splitlines()))
        if verify.returncode != 0:
            fail(f"marin verify exit {verify.returncode}: {verify.stderr.strip()}")

    def _check_listings(self, folder: str, path: str) -> None:
        fail = self.tally.failures.append
        names = fs.listdir(path)
        if "index.json" in names:
            data = json.loads(fs.read_text(fs.join(path, "index.json")))
            groups = data["splits"] if "splits" in data else {"": data}
            for split, group in groups.items():
                listed = {s["path"] for s in group["shards"]}
                shard_dir = fs.join(path, split) if split else path
                entries = fs.listdir(shard_dir)
                present = {f"{split}/{n}" if split else n for n in entries if n.endswith(".array_record")}
                hidden = [n for n in entries if n.startswith(".")]
                if present != listed or hidden:
                    fail(f"{folder}/{split}: shard files {sorted(present)} (hidden {hidden}) != index {sorted(listed)}")
        if "checkpoints" in names:
            ckpt = fs.join(path, "checkpoints")
            entries = fs.listdir(ckpt)
            odd = [n for n in entries if not n.isdigit()]
            if odd:
                fail(f"{folder}/checkpoints: entries that are not committed steps: {odd}")
            for step in entries:
                if step.isdigit() and "_CHECKPOINT_METADATA" not in fs.listdir(fs.join(ckpt, step)):
                    fail(f"{folder}/checkpoints/{step}: no _CHECKPOINT_METADATA (uncommitted)")

    def _compare_params(self, ours: str, theirs: str) -> None:
        import numpy as np

        fail = self.tally.failures.append
        a_path, b_path = fs.join(ours, "final", "params.npz"), fs.join(theirs, "final", "params.npz")
        if not fs.exists(a_path) or not fs.exists(b_path):
            fail(f"final params missing: {a_path if not fs.exists(a_path) else b_path}")
            return
        with np.load(io.BytesIO(fs.read_bytes(a_path))) as a, np.load(io.BytesIO(fs.read_bytes(b_path))) as b:
            if sorted(a.files) != sorted(b.files):
                fail(f"final params have other arrays: {sorted(a.files)} vs {sorted(b.files)}")
                return
            for key in a.files:
                x, y = a[key], b[key]
                if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
                    fail(f"final params differ from the clean run in {key}")
            self.log(f"final params: {len(a.files)} arrays, bit for bit equal to the clean run"
                     if not any("final params differ" in f for f in self.tally.failures) else "final params DIFFER")


def _all_cached(runner: Runner, steps: int) -> bool:
    """Whether ``runner`` ended well, its summary saying all ``steps`` steps were cached (a line ``N cached``)."""
    lines = runner.output.read_text(errors="replace").splitlines()
    return runner.proc.returncode == 0 and f"{steps} cached" in (line.strip() for line in lines)


def _readers(plan: Any) -> dict[str, set[str]]:
    """Step name -> the steps that read it: through its config, or by reading an expanding step
    it was expanded from (such a reader waits for the whole expansion)."""
    from marin.execution.plan.expansion import closure

    names = [p.name for p in plan.steps]
    readers: dict[str, set[str]] = {name: set() for name in names}
    for j, p in enumerate(plan.steps):
        for d in p.deps:
            for q in (d, *closure(plan.expansions, d)):
                readers[names[q]].add(names[j])
    return readers


def _same_but_prefix(a: str, b: str, prefix_a: str, prefix_b: str) -> bool:
    return fs.read_bytes(a).replace(prefix_a.encode(), b"<prefix>") == \
        fs.read_bytes(b).replace(prefix_b.encode(), b"<prefix>")


def _manifest_digests(output_path: str) -> dict[str, str]:
    from marin.execution.store.records import StepRecord

    record = StepRecord(output_path)
    manifest = record.read_json(record.manifest) or {}
    return {e["path"]: e["sha256"] for e in manifest.get("files", [])}


def summary(t: Tally, ledger: seen.BuildLedger) -> list[str]:
    """The report's lines: kills by kind and moment, races, leases, reuse."""
    kills = ", ".join(f"{t.kills[k]} {k}" for k in KILL_KINDS)
    moments = []
    for m in KILL_MOMENTS:
        landed = sorted((where, n) for (moment, where), n in t.landed.items() if moment == m and where != m)
        moments.append(f"{t.moments[m]} {m}" + (f" (landed: {', '.join(f'{n} {w}' for w, n in landed)})"
                                                if landed else ""))
    again = {how: sorted((step, n) for (h, step), n in t.leases_taken_again.items() if h == how)
             for how in ("takeover", "after release", "?")}
    taken = "; ".join(f"{sum(n for _s, n in rows)} {how} ({', '.join(f'{s} {n}' for s, n in rows)})"
                      for how, rows in again.items() if rows) or "none"
    return [f"survived {t.total_kills} kills ({kills}), {t.freezes} freezes and {t.races} races ({t.racers} runners)",
            f"freezes: the frozen runners held {t.frozen_leases} lease(s), {t.frozen_taken_over} taken over by "
            f"another runner while they were frozen; {t.frozen_elsewhere} played as a machine elsewhere "
            f"({t.placed_elsewhere} running step(s) named as another host's, {t.taken_apart} of them taken over by "
            f"a holder writing in an attempt folder); {t.written_apart} output(s) published from an attempt "
            f"folder at the end",
            f"kill moments: {', '.join(moments)}",
            f"leases taken again: {taken}; runners waited on another's lease {t.waits} times and took "
            f"{t.built_by_another} steps as built by another runner",
            f"dedup map tasks: {ledger.map_tasks['done']} done over every attempt, {ledger.map_tasks['reused']} of them "
            f"reused from an attempt that was killed"] + \
        ([f"nodes: runners on {len(t.on_node)} Ray nodes ({', '.join(f'{n} {k}' for n, k in sorted(t.on_node.items()))}); "
          f"{t.races_across_nodes} of {t.races} races across nodes"] if t.on_node else [])


@contextlib.contextmanager
def _nodes(count: int, workdir: Path) -> Iterator[SoakNodes | None]:
    """A local Ray cluster of ``count`` nodes for the runners (none for 0)."""
    if not count:
        yield None
        return
    from testsupport.soak.nodes import soak_nodes

    with soak_nodes(count, workdir, os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)) as n:
        yield n


def _fault_report(proxy: Any, workdir: Path) -> list[str]:
    """``fault <kind>: <count>`` of every kind (in the proxy's order), and the proxy's log of every
    fault with the request it hit in ``<workdir>/faults.log``; nothing without ``--faults``."""
    if proxy is None:
        return []
    from testsupport.faults import FaultKind

    counts = proxy.counts()
    with open(workdir / "faults.log", "w", encoding="utf-8") as f:
        f.writelines(f"{event}\n" for event in list(proxy.log))
    sessions = proxy.upload_sessions()
    return [f"requests through the fault proxy: {proxy.count()}, faulted: {sum(counts.values())}"
            f" (every fault and its request: {workdir / 'faults.log'}); resumable uploads: "
            f"{sum(sessions.values())} opened, {sessions['finished']} finished, {sessions['cancelled']} cancelled, "
            f"{sessions['open']} left open"] + \
        [f"fault {kind.value}: {counts[kind.value]}" for kind in FaultKind]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testsupport.soak",
                                     description=(__doc__ or "The seeded soak.").splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    parser.add_argument("--rounds", type=int, default=12, help="kill/race rounds before the final run")
    parser.add_argument("--workdir", default=None, help="where prefixes and logs go (default: a new temp dir)")
    parser.add_argument("--prefix", choices=("local", "gs"), default="local",
                        help="local: folders of the workdir (default); gs: a bucket on a fake-gcs-server the soak "
                             "starts, which enforces the store's preconditions as GCS does")
    parser.add_argument("--faults", type=float, default=None, metavar="RATE",
                        help="(with --prefix gs) the share of the runners' store requests that fail, spread over every "
                             "kind of fault (testsupport.faults); 0: every request through the proxy, none failed")
    parser.add_argument("--nodes", type=int, default=None, metavar="N",
                        help="runners on the N nodes of a local multi-node Ray cluster (default: 3 with --faults, "
                             "else 0: on this host)")
    parser.add_argument("--graph", choices=sorted(GRAPHS), default="full",
                        help="full: training, shuffle and sweep (default); small: the corpus, tokenizer and "
                             "tokenized shards only (a soak of a few rounds in seconds)")
    parser.add_argument("--train-steps", type=int, default=TRAIN_STEPS, metavar="N",
                        help=f"the full graph's model trains N steps, a checkpoint every {SAVE_EVERY} (default "
                             f"{TRAIN_STEPS}; fewer for a short soak whose kills land elsewhere)")
    args = parser.parse_args(argv)
    if args.rounds < 0:
        parser.error(f"--rounds must be >= 0, got {args.rounds}")
    if args.train_steps < 1:
        parser.error(f"--train-steps must be >= 1, got {args.train_steps}")
    if args.faults is not None and not 0.0 <= args.faults < 1.0:
        parser.error(f"--faults must be in [0, 1), got {args.faults}")
    if args.faults is not None and args.prefix != "gs":
        parser.error("--faults needs --prefix gs (the faults are an object store's)")
    nodes = args.nodes if args.nodes is not None else (3 if args.faults is not None else 0)
    if not 0 <= nodes <= 26:
        parser.error(f"--nodes must be between 0 and 26, got {nodes}")
    # A SIGTERM ends the soak as Ctrl-C does: its runners are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="marin-soak-")).resolve()
    if workdir.is_dir() and any(workdir.iterdir()):
        # An earlier soak's call counts and prefixes would read as steps built twice.
        parser.error(f"--workdir {workdir} is not empty (an earlier soak's?); give a new or empty folder")
    workdir.mkdir(parents=True, exist_ok=True)
    # Read by the graph (testsupport.soak.graph.train_steps) here and in every process started with
    # this environment: the runners, the clean run, `marin verify`.
    os.environ[TRAIN_STEPS_ENV] = str(args.train_steps)
    log = Log(workdir / "soak.log")
    started = time.monotonic()
    try:
        with open_stores(args.prefix, str(workdir), faults=args.faults, seed=args.seed) as stores, \
                _nodes(nodes, workdir) as on_nodes:
            soak = Soak(workdir, args.seed, log, stores, graph=GRAPHS[args.graph], nodes=on_nodes)
            log(f"soak: seed {args.seed}, {args.rounds} rounds, prefix {soak.prefix}, workdir {workdir}"
                + (f", {args.faults:.0%} of the runners' requests faulted" if args.faults is not None else "")
                + (f", runners on {nodes} Ray nodes" if nodes else "") + f", graph {args.graph}"
                + (f", {args.train_steps} training steps" if args.graph == "full" else ""))
            try:
                if not soak.run_to_completion(soak.clean_prefix, "clean"):
                    log("the clean reference run failed; nothing to compare against")
                    return 1
                for n in range(1, args.rounds + 1):
                    soak.round(n)
                if soak.run_to_completion(soak.prefix, "final"):
                    soak.check()
            finally:
                soak.stop_runners()
                faults = _fault_report(stores.proxy, workdir)
    finally:
        log.close()
    t = soak.tally
    problems = t.unexpected + t.failures
    for line in faults:
        print(line)
    lines = summary(t, soak.ledger)
    print(f"\nsoak seed {args.seed} on {args.prefix}: {t.rounds} rounds in {time.monotonic() - started:.0f}s; "
          + lines[0])
    for line in lines[1:]:
        print(line)
    for p in problems:
        print(f"PROBLEM: {p}")
    print("soak: OK" if not problems else f"soak: FAILED ({len(problems)} problems); logs in {workdir}")
    return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
