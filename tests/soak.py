"""Seeded soak test: build the nano graph again and again while killing and racing its runners.

``make soak`` (``python -m tests.soak``) runs a small corpus -> tokenizer -> tokenized -> nano
Llama graph as real ``marin run`` subprocesses on one prefix, round after round. Each round does
one seeded, logged thing to it: SIGKILL a process of a runner, at a random moment or just after a
new checkpoint appears, or start two or three runners at once on the same prefix (sometimes
killing a process of one of them). The processes it kills (:data:`KILL_KINDS`): the runner; a
step's process (forked from the runner's warm template, or a fresh interpreter); a step's whole
process group; the warm template itself (the steps forked from it must end with it). Then it runs
the graph to the end and checks what a researcher relies on:

* every step eventually succeeds, and a second run finds all of them cached;
* the final parameters equal those of a clean run (separate prefix) bit for bit, and the data
  steps' files equal the clean run's byte for byte;
* no lease is left live under the prefix, and of each step's lease files only the newest is left
  (released when the step was published: numbers never repeat on a folder);
* every step that claims success has all files of its manifest with matching checksums
  (and ``marin verify`` agrees);
* no temporary file is left visible as a shard or a checkpoint;
* no runner ended in a way the round does not explain (a traceback, a hang, a step process that
  outlived its killed runner).

It prints how many kills of each kind and races it survived, how often a step's lease was taken
again (a lease number above 1 seen on its ``.marin/``: a takeover from a dead or expired holder, or
after a release) and how often a runner waited for another's lease, and exits 1 when any check
fails. Options: ``--seed``, ``--rounds``, ``--workdir`` (kept for
inspection), ``--prefix`` (``local``: a folder of the workdir; ``gs``: a bucket on a
fake-gcs-server the soak starts, which enforces the store's preconditions as GCS does).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rigging import filesystem as fs

ROOT = Path(__file__).resolve().parents[1]
GRAPH_FILE = Path(__file__).resolve()
TRAIN_STEPS = 48
SAVE_EVERY = 4
KILL_KINDS = ("runner", "step", "step-group", "template")
"""What a kill round may SIGKILL: the runner; one step process; a step's whole process group; the
runner's warm template (fray.pool), which every step forked from it must follow."""
_TEMPLATE_MARK = "from fray.pool import template_main"
"""In the command line of a warm template, and of every step process forked from it."""
_LEASE_RE = re.compile(r"^lease-(\d{8})\.json$")


def steps() -> list:
    """The soak graph (``marin run tests/soak.py:steps``): small enough for CI, every stage real."""
    from levanter.checkpoint import CheckpointConfig
    from levanter.models.llama import LlamaConfig
    from levanter.optim import AdamConfig
    from marin.experiment.data import bundled_corpus, tokenized, trained_tokenizer
    from marin.experiment.train import train_lm

    corpus = bundled_corpus(name="soak/raw", num_stories=300, seed=0, num_shards=3)
    tokenizer = trained_tokenizer(name="soak/tokenizer", source=corpus, vocab_size=320)
    data = tokenized(name="soak/tokenized", source=corpus, tokenizer=tokenizer, num_shards=3)
    model = train_lm(
        name="soak/model", version="v1",
        model=LlamaConfig(vocab_size=320, hidden_dim=32, intermediate_dim=64, num_heads=2, num_kv_heads=2,
                          num_layers=2, max_seq_len=64),
        optimizer=AdamConfig(learning_rate=3e-3, warmup=4),
        datasets={data: 1.0}, batch_size=8, seq_len=64, num_train_steps=TRAIN_STEPS, eval_every=0,
        eval_batches=1,
        # Checkpoints every few steps, so kills land between checkpoints and resumes skip work.
        checkpoint=CheckpointConfig(save_every=SAVE_EVERY, keep_last=2),
    )
    return [model]


# -- bookkeeping ----------------------------------------------------------------------------------

@dataclass
class Tally:
    """What the soak did and what it saw."""

    rounds: int = 0
    kills: Counter = field(default_factory=Counter)  # a kind of KILL_KINDS -> count
    races: int = 0
    racers: int = 0
    resumed_from_checkpoint: int = 0
    leases_taken_again: Counter = field(default_factory=Counter)  # ("takeover" | "after release" | "?", step)
    waits: int = 0  # "[wait]" lines: a runner found another holding a step's lease
    built_by_another: int = 0  # steps a runner took as "built by another runner"
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
    proc: subprocess.Popen
    output: Path
    killed: bool = False  # we SIGKILLed the runner itself
    step_killed: bool = False  # we SIGKILLed one of its step processes, their group, or its template


@dataclass(frozen=True)
class Stores:
    """Where the soak builds (``soak``) and where its clean reference run builds (``clean``)."""

    soak: str
    """The prefix every round's runners share."""
    clean: str
    """The prefix of the reference run without kills."""
    env: dict[str, str] = field(default_factory=dict)
    """What runners need besides the soak's own environment (the emulator's address)."""


@contextlib.contextmanager
def open_stores(kind: str, workdir: Path) -> Iterator[Stores]:
    """The soak's prefixes: ``local`` folders of ``workdir``, or ``gs`` folders of a bucket on a
    fake-gcs-server started here (and pointed at by this process while the soak runs)."""
    if kind == "local":
        yield Stores(str(workdir / "soak-prefix"), str(workdir / "clean-prefix"))
        return
    from testsupport.gcs import emulator_env, start_fake_gcs_server, use_gcs_emulator

    emulator = start_fake_gcs_server()
    try:
        bucket = emulator.create_bucket()
        with use_gcs_emulator(emulator.url):
            yield Stores(f"{bucket}/soak-prefix", f"{bucket}/clean-prefix", emulator_env(emulator.url))
    finally:
        emulator.stop()


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARIN_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def start_runner(prefix: str, output: Path, tag: str, env: dict[str, str]) -> Runner:
    """``marin run tests/soak.py:steps --prefix P`` in the workspace, output to a file."""
    output.parent.mkdir(parents=True, exist_ok=True)
    out = open(output, "wb")  # noqa: SIM115 - the child holds it; closed below
    command = [sys.executable, "-m", "marin.cli.main", "run", f"{GRAPH_FILE}:steps", "--prefix", prefix]
    proc = subprocess.Popen(command, cwd=ROOT, env=_env(env), stdout=out, stderr=subprocess.STDOUT)
    out.close()
    return Runner(tag, proc, output)


def _descendants(runner: Runner) -> list:
    """Every live process under ``runner``: [(process, its command line, its parent pid)]."""
    import psutil

    try:
        children = psutil.Process(runner.proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        try:
            found.append((child, " ".join(child.cmdline()), child.ppid()))
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    return found


def templates(runner: Runner) -> list:
    """The runner's warm templates (``fray.pool``): its own children that fork the step processes."""
    return [p for p, cmdline, ppid in _descendants(runner) if _TEMPLATE_MARK in cmdline and ppid == runner.proc.pid]


def step_processes(runner: Runner) -> list:
    """The step processes under ``runner``: forked from a warm template (a template's child, with
    its command line), or a fresh interpreter of ``multiprocessing`` (not its resource tracker)."""
    pid = runner.proc.pid
    return [p for p, cmdline, ppid in _descendants(runner)
            if (_TEMPLATE_MARK in cmdline and ppid != pid)
            or ("spawn_main" in cmdline and "resource_tracker" not in cmdline)]


def _wait_until(condition: Callable[[], bool], timeout: float, runners: list[Runner], interval: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if all(r.proc.poll() is not None for r in runners):
            return False
        time.sleep(interval)
    return False


def _why_not(runners: list[Runner], timeout: float) -> str:
    """Why a wait of :func:`_wait_until` gave up (for the log)."""
    return "the runners ended" if all(r.proc.poll() is not None for r in runners) else f"waited {timeout:.0f}s"


def _output_folder(prefix: str, name: str) -> str | None:
    parent = fs.join(prefix, os.path.dirname(name))
    base = os.path.basename(name)
    found = [n for n in fs.listdir(parent) if n.rsplit("-", 1)[0] == base]
    return fs.join(parent, found[0]) if found else None


def _checkpoint_entries(prefix: str) -> set[str]:
    model = _output_folder(prefix, "soak/model")
    return set(fs.listdir(fs.join(model, "checkpoints"))) if model else set()


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
        for output in fs.listdir(fs.join(self.prefix, "soak")):
            meta = fs.join(self.prefix, "soak", output, ".marin")
            numbers = sorted(int(m.group(1)) for m in map(_LEASE_RE.match, fs.listdir(meta)) if m)
            if not numbers:
                continue
            known = self.newest.get(output, 0)
            if numbers[-1] < known:
                known = 0  # the output was removed and built anew: its numbering started again
            for number in range(max(known + 1, 2), numbers[-1] + 1):
                self.events.append((f"soak/{output.rsplit('-', 1)[0]}", number, self._how(meta, number - 1)))
            self.newest[output] = numbers[-1]

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


class Soak:
    """The rounds, the final run and the checks."""

    def __init__(self, workdir: Path, seed: int, log: Log, stores: Stores):
        self.workdir = workdir
        self.prefix = stores.soak
        self.clean_prefix = stores.clean
        self.env = stores.env
        self.rng = random.Random(seed)
        self.log = log
        self.tally = Tally()
        self.leases = LeaseWatch(self.prefix)
        self.runners: list[Runner] = []

    def _runner(self, round_no: int, tag: str, prefix: str | None = None) -> Runner:
        runner = start_runner(prefix or self.prefix, self.workdir / "logs" / f"r{round_no:03d}-{tag}.txt", tag,
                              self.env)
        self.runners.append(runner)
        self.log(f"  start runner {tag} (pid {runner.proc.pid})")
        return runner

    def stop_runners(self) -> None:
        """End every runner still running (the soak was interrupted); their steps follow them."""
        for r in self.runners:
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()

    # -- killing ---------------------------------------------------------------------------------
    def _trigger(self, runners: list[Runner]) -> str:
        """Wait for a seeded moment; returns what it waited for (for the log)."""
        kind = self.rng.choice(["time", "time", "step-start", "checkpoint"])
        if kind == "time":
            delay = self.rng.uniform(0.3, 12.0)
            _wait_until(lambda: False, delay, runners)
            return f"after {delay:.2f}s"
        if kind == "step-start":
            delay = self.rng.uniform(0.0, 4.0)
            if not _wait_until(lambda: any(step_processes(r) for r in runners), 60, runners):
                return f"when no step had started ({_why_not(runners, 60)})"
            _wait_until(lambda: False, delay, runners)
            return f"{delay:.2f}s after a step process started"
        before = _checkpoint_entries(self.prefix)
        delay = self.rng.uniform(0.0, 0.25)
        if not _wait_until(lambda: bool(_checkpoint_entries(self.prefix) - before), 90, runners, interval=0.02):
            return f"when no new checkpoint had appeared ({_why_not(runners, 90)})"
        _wait_until(lambda: False, delay, runners)
        return f"{delay:.3f}s after a new checkpoint entry appeared"

    def _kill(self, runners: list[Runner], victim: Runner) -> None:
        import psutil

        what = self.rng.choice(KILL_KINDS)
        when = self._trigger(runners)
        if victim.proc.poll() is not None:
            self.log(f"  no kill: runner {victim.tag} already exited ({victim.proc.returncode}) [{when}]")
            return
        workers = templates(victim) if what == "template" else step_processes(victim)
        if what != "runner" and not workers:
            when += f" (drew {what}, but no such process was running)"
            what = "runner"  # between steps (or before its first): nothing else to kill
        if what == "runner":
            descendants = []
            try:
                descendants = psutil.Process(victim.proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                pass
            victim.proc.send_signal(signal.SIGKILL)
            victim.killed = True
            self.tally.kills["runner"] += 1
            self.log(f"  KILL runner {victim.tag} (pid {victim.proc.pid}) {when}")
            # Its step processes must not outlive it: they would write into an output that the
            # next runner takes over (fray's watchdog ends them within a fraction of a second).
            _, alive = psutil.wait_procs(descendants, timeout=5)
            alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
            if alive:
                self.tally.unexpected.append(f"processes {[p.pid for p in alive]} outlived killed runner {victim.tag}")
                for p in alive:
                    p.kill()
            return
        worker = self.rng.choice(workers)
        victim.step_killed = True
        try:
            forked = worker.children(recursive=True) if what == "template" else []
            if what == "step-group":
                group = os.getpgid(worker.pid)
                if group in (os.getpgrp(), os.getpgid(victim.proc.pid)):
                    # Never the soak's (or the runner's) own group: a step must lead a group of its own.
                    self.tally.unexpected.append(f"step process {worker.pid} of {victim.tag} shares group {group}")
                    victim.step_killed = False
                    return
                os.killpg(group, signal.SIGKILL)
            else:
                worker.send_signal(signal.SIGKILL)
        except (ProcessLookupError, psutil.NoSuchProcess):
            self.log(f"  no kill: {what} process {worker.pid} of {victim.tag} already gone [{when}]")
            victim.step_killed = False
            return
        self.tally.kills[what] += 1
        self.log(f"  KILL {what} {worker.pid} of runner {victim.tag} {when}"
                 + (f" (with {len(forked)} step process(es) forked from it)" if what == "template" else ""))
        if forked:
            # A step forked from the template must not outlive it (its watchdog ends its group).
            _, alive = psutil.wait_procs(forked, timeout=5)
            alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
            if alive:
                self.tally.unexpected.append(f"processes {[p.pid for p in alive]} outlived killed template "
                                             f"{worker.pid} of {victim.tag}")
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

    def _make_work(self) -> None:
        """When the graph is already built, remove the newest outputs so the round has work."""
        from marin.execution.plan.make import make_plan
        from marin.execution.store.records import StepRecord
        from marin.execution.store.store import StepStore

        plan = make_plan(steps(), StepStore(self.prefix), explain=False)
        if not all(StepRecord(p.output_path).is_done() for p in plan.steps):
            return
        k = self.rng.choice([1, 1, 2, len(plan.steps)])
        removed = [p.output_name for p in plan.steps[-k:]]
        for p in plan.steps[-k:]:
            fs.rm_tree(p.output_path)
        self.log(f"  graph already built: removed {', '.join(removed)}")

    def round(self, n: int) -> None:
        self.tally.rounds += 1
        self._make_work()
        with self.leases:
            self._round(n)
        for step, number, how in self.leases.events:
            self.tally.leases_taken_again[how, step] += 1
            self.log(f"  {step}: lease {number} taken ({how})")

    def _round(self, n: int) -> None:
        kind = self.rng.choice(["kill", "kill", "race"])
        if kind == "kill":
            self.log(f"round {n}: one runner, one kill")
            runner = self._runner(n, "a")
            self._kill([runner], runner)
            self._finish_round([runner])
            return
        k = self.rng.choice([2, 3])
        kill_one = self.rng.random() < 0.6
        self.log(f"round {n}: race of {k} runners{' with a kill' if kill_one else ''}")
        self.tally.races += 1
        self.tally.racers += k
        runners = []
        for i in range(k):
            runners.append(self._runner(n, "abc"[i]))
            time.sleep(self.rng.uniform(0.0, 0.3))
        if kill_one:
            self._kill(runners, self.rng.choice(runners))
        self._finish_round(runners)

    def run_to_completion(self, prefix: str, label: str) -> bool:
        for attempt in range(1, 4):
            self.log(f"{label}: run to completion, attempt {attempt}")
            runner = self._runner(0, f"{label}-{attempt}", prefix)
            self._finish_round([runner], timeout=300)
            if runner.proc.returncode == 0:
                return True
        self.tally.failures.append(f"{label}: the graph did not complete in 3 runs without kills")
        return False

    # -- checks ----------------------------------------------------------------------------------
    def check(self) -> None:
        from marin.execution.plan.make import make_plan
        from marin.execution.store.gc import find_outputs
        from marin.execution.store.records import StepRecord
        from marin.execution.store.store import StepStore
        from marin.execution.store.verify import verify_output
        from rigging.lease import current_lease

        fail = self.tally.failures.append
        store = StepStore(self.prefix)
        clean = StepStore(self.clean_prefix)
        plan = make_plan(steps(), store, explain=False)
        clean_plan = make_plan(steps(), clean, explain=False)
        # 1. Every step succeeded, and a rerun is a no-op.
        for p in plan.steps:
            if not StepRecord(p.output_path).is_done():
                fail(f"{p.output_name}: not done at the end")
        cached = self._runner(0, "rerun")
        self._finish_round([cached])
        text = cached.output.read_text(errors="replace")
        if cached.proc.returncode != 0 or f"{len(plan.steps)} cached" not in text:
            fail(f"a rerun after the soak was not all cached (see {cached.output})")
        # 2. Bit-for-bit equal to the clean run.
        for p, q in zip(plan.steps, clean_plan.steps, strict=True):
            if p.name == "soak/model":
                self._compare_params(p.output_path, q.output_path)
            else:
                ours = _manifest_digests(p.output_path)
                theirs = _manifest_digests(q.output_path)
                differ = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
                # Shard commit records name their input files, which live under each prefix.
                differ = [k for k in differ if k not in ours or k not in theirs or not _same_but_prefix(
                    fs.join(p.output_path, k), fs.join(q.output_path, k), self.prefix, self.clean_prefix)]
                if differ:
                    fail(f"{p.name}: files differ from the clean run: {differ[:5]}")
        # 3. No lease left live, 4. manifests hold, 5. no temporary file visible.
        leftover_meta_tmp = 0
        outputs = find_outputs(store)
        for folder in sorted(outputs):
            path = fs.join(store.prefix, folder)
            meta = fs.join(path, ".marin")
            leases = [n for n in fs.listdir(meta) if n.startswith("lease-")]
            info = current_lease(meta)
            if len(leases) > 1 or (info is not None and not info.released):
                fail(f"{folder}: lease files left: {leases} (newest: {info})")
            check = verify_output(folder, path)
            if check.verdict.is_problem or check.verdict.value == "not built":
                fail(f"{folder}: {check.verdict.value}: {check.problems[:3]}")
            for rel, _size in fs.walk_files(path):
                parts = rel.split("/")
                if any(".tmp-" in n or "orbax-checkpoint-tmp" in n or n.endswith((".tmp", ".partial")) for n in parts):
                    if parts[0] == ".marin":
                        leftover_meta_tmp += 1
                    else:
                        fail(f"{folder}: temporary file left visible: {rel}")
            self._check_listings(folder, path)
        if leftover_meta_tmp:
            self.log(f"note: {leftover_meta_tmp} temporary record file(s) left inside .marin/ folders")
        verify = subprocess.run([sys.executable, "-m", "marin.cli.main", "verify", f"{GRAPH_FILE}:steps",
                                 "--prefix", self.prefix], cwd=ROOT, env=_env(self.env), capture_output=True,
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


def _same_but_prefix(a: str, b: str, prefix_a: str, prefix_b: str) -> bool:
    return fs.read_bytes(a).replace(prefix_a.encode(), b"<prefix>") == \
        fs.read_bytes(b).replace(prefix_b.encode(), b"<prefix>")


def _manifest_digests(output_path: str) -> dict[str, str]:
    from marin.execution.store.records import StepRecord

    record = StepRecord(output_path)
    manifest = record.read_json(record.manifest) or {}
    return {e["path"]: e["sha256"] for e in manifest.get("files", [])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    parser.add_argument("--rounds", type=int, default=12, help="kill/race rounds before the final run")
    parser.add_argument("--workdir", default=None, help="where prefixes and logs go (default: a new temp dir)")
    parser.add_argument("--prefix", choices=("local", "gs"), default="local",
                        help="local: folders of the workdir (default); gs: a bucket on a fake-gcs-server the soak "
                             "starts, which enforces the store's preconditions as GCS does")
    args = parser.parse_args(argv)
    if args.rounds < 0:
        parser.error(f"--rounds must be >= 0, got {args.rounds}")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="marin-soak-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    log = Log(workdir / "soak.log")
    started = time.monotonic()
    try:
        with open_stores(args.prefix, workdir) as stores:
            soak = Soak(workdir, args.seed, log, stores)
            log(f"soak: seed {args.seed}, {args.rounds} rounds, prefix {soak.prefix}, workdir {workdir}")
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
    finally:
        log.close()
    t = soak.tally
    problems = t.unexpected + t.failures
    kills = ", ".join(f"{t.kills[k]} {k}" for k in KILL_KINDS)
    again = {how: sorted((step, n) for (h, step), n in t.leases_taken_again.items() if h == how)
             for how in ("takeover", "after release", "?")}
    taken = "; ".join(f"{sum(n for _s, n in rows)} {how} ({', '.join(f'{s} {n}' for s, n in rows)})"
                      for how, rows in again.items() if rows) or "none"
    print(f"\nsoak seed {args.seed} on {args.prefix}: {t.rounds} rounds in {time.monotonic() - started:.0f}s; "
          f"survived {t.total_kills} kills ({kills}) and {t.races} races ({t.racers} runners)")
    print(f"leases taken again: {taken}; runners waited on another's lease "
          f"{t.waits} times and took {t.built_by_another} steps as built by another runner")
    for p in problems:
        print(f"PROBLEM: {p}")
    print("soak: OK" if not problems else f"soak: FAILED ({len(problems)} problems); logs in {workdir}")
    return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
