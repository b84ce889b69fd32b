"""Module-level step functions, configs and small helpers shared by the marin engine tests.

Workers import step functions by module name, so everything a step runs lives here. The module
is imported by its own top-level name, ``steps_for_tests``, not as part of ``testsupport``: a step's
hash holds ``module:qualname`` of its function and config classes, and the pinned digests of
``test_hashing`` (like the records the tests read) were computed under this name. marin's
``conftest.py`` puts this folder (:data:`IMPORT_DIR`) on ``sys.path``; spawned workers inherit it,
subprocess runners get it on ``PYTHONPATH``, and the runner falls back to loading this file by path.

Calls are counted across processes by appending one line per call to ``calls.txt`` in the
config's ``counter_dir`` (an unhashed field, so counting does not change any hash).
"""

from __future__ import annotations

import collections
import enum
import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fray.inprocess import InProcessClient  # memory:// stores live in one process: steps run in it
from marin.execution.core.placeholders import output_path_of
from marin.execution.core.step import Step, unhashed_field
from marin.execution.core.traits import Start, StepTraits, step_function
from rigging import filesystem as fs
from rigging.secrets import Secret

__all__ = [
    "InProcessClient",
    "NodeConfig",
    "calls",
    "chain",
    "diamond",
    "node",
    "record",
]

CALLS_FILE = "calls.txt"
IMPORT_DIR = os.path.dirname(os.path.abspath(__file__))
WORKSPACE = os.path.dirname(os.path.dirname(IMPORT_DIR))


@dataclass(frozen=True)
class NodeConfig:
    """Config of :func:`record`.

    Attributes:
        label: what the step writes (and the name it counts under).
        value: any number; changing it changes the hash.
        inputs: placeholders of upstream outputs; each upstream ``out.txt`` is read.
        sleep: seconds to sleep before writing, on the first call of this label only (so a
            step killed mid-sleep finishes at once when run again).
        fail: raise instead of writing.
        counter_dir: where calls are counted (not hashed).
        log_every: a field marked as not affecting the result.
        token: an optional secret (enters the hash by name only).
        extra: free-form hashed data.
    """

    label: str
    value: int = 0
    inputs: tuple[Any, ...] = ()
    sleep: float = 0.0
    fail: bool = False
    counter_dir: str = unhashed_field(default="")
    log_every: int = unhashed_field(default=10)
    token: Secret | None = None
    extra: Any = None


def _count(counter_dir: str, label: str) -> int:
    """Count this call; return how many calls of ``label`` there have been, this one included."""
    if not counter_dir:
        return 1
    os.makedirs(counter_dir, exist_ok=True)
    # One small O_APPEND write per call: atomic between processes on a local file system.
    fd = os.open(os.path.join(counter_dir, CALLS_FILE), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{label} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    return calls(counter_dir)[label]


def record(config: NodeConfig, output_path: str) -> None:
    """Count the call, read every input, then write ``out.txt`` (or fail, or sleep first)."""
    n = _count(config.counter_dir, config.label)
    print(f"running {config.label} into {output_path}", flush=True)
    upstream = [fs.read_text(fs.join(p, "out.txt")) for p in config.inputs]
    if config.sleep and n == 1:
        fs.atomic_write(fs.join(output_path, "partial.txt"), "started")
        time.sleep(config.sleep)
    if config.fail:
        raise RuntimeError(f"step {config.label} failed on purpose")
    body = json.dumps({"label": config.label, "value": config.value, "inputs": upstream})
    fs.atomic_write(fs.join(output_path, "out.txt"), body)


def steal_lease(config: NodeConfig, output_path: str) -> None:
    """On its first call, let a (fake) runner on another host take this step's lease over.

    The lease it creates expires after ``config.sleep`` seconds; until then the runner that
    started this call has lost its lease and must not publish. With ``config.fail`` the call then
    dies at once (SIGKILL), as a process the new holder ended before its runner's heartbeat
    noticed the loss.
    """
    from rigging.lease import current_lease

    n = _count(config.counter_dir, config.label)
    meta = fs.join(output_path, ".marin")
    if n == 1:
        held = current_lease(meta)
        assert held is not None, "the runner holds no lease while its step runs"
        body = json.dumps({"holder": "elsewhere:1:thief", "expires_at": time.time() + config.sleep,
                           "token": held.token + 1})
        assert fs.create_if_absent(fs.join(meta, f"lease-{held.token + 1:08d}.json"), body)
        if config.fail:
            os.kill(os.getpid(), signal.SIGKILL)
    published = fs.exists(fs.join(meta, "success.json"))
    fs.atomic_write(fs.join(output_path, "out.txt"), json.dumps({"call": n, "published_before": published}))


@dataclass(frozen=True)
class ScribbleConfig:
    """Config of :func:`scribble`: rewrite ``v.txt`` every ``every`` seconds for ``seconds``, or until
    the file ``until`` exists (a test's word that it has seen what it waited for: no step need run
    longer than that; "": the whole ``seconds``)."""

    label: str
    seconds: float = 4.0
    every: float = 0.05
    counter_dir: str = unhashed_field(default="")
    until: str = unhashed_field(default="")


def scribble(config: ScribbleConfig, output_path: str) -> None:
    """Keep rewriting ``v.txt`` with this process's pid and a count, as a training loop keeps
    writing checkpoints: a copy of it that outlives its lease would change the published file.
    ``start.txt`` says what ``v.txt`` held when it started (what it could resume from)."""
    _count(config.counter_dir, config.label)
    path = fs.join(output_path, "v.txt")
    # What an earlier attempt left to resume from (as a training step finds its checkpoints).
    fs.atomic_write(fs.join(output_path, "start.txt"), fs.read_text(path) if fs.exists(path) else "", durable=False)
    deadline = time.monotonic() + config.seconds
    i = 0
    while time.monotonic() < deadline and not (config.until and os.path.exists(config.until)):
        fs.atomic_write(path, f"{os.getpid()} {i}", durable=False)
        i += 1
        time.sleep(config.every)
    fs.atomic_write(path, f"{os.getpid()} final", durable=False)
    _count(config.counter_dir, config.label + ".end")


def scribble_fan(counter_dir: str, width: int = 4, seconds: float = 5.0, every: float = 0.01,
                 until: str = "") -> list[Step]:
    """``width`` independent :func:`scribble` steps named ``frozen/s<i>``."""
    return [Step(f"frozen/s{i}", scribble, ScribbleConfig(f"frozen.s{i}", seconds, every, counter_dir, until))
            for i in range(width)]


@dataclass(frozen=True)
class CopyConfig:
    """Config of :func:`copy_v`: the folder of the step whose ``v.txt`` it copies."""

    source: Any
    label: str
    counter_dir: str = unhashed_field(default="")


def copy_v(config: CopyConfig, output_path: str) -> None:
    """Copy ``v.txt`` of the step it reads into its own output, as any step reads another's files."""
    _count(config.counter_dir, config.label)
    fs.atomic_write(fs.join(output_path, "v.txt"), fs.read_text(fs.join(config.source, "v.txt")))


def scribble_then_copy(counter_dir: str, seconds: float = 6.0, every: float = 0.01, until: str = "") -> list[Step]:
    """A :func:`scribble` step ``apart/s`` and a :func:`copy_v` step ``apart/r`` reading it."""
    scribbler = Step("apart/s", scribble, ScribbleConfig("apart.s", seconds, every, counter_dir, until))
    return [Step("apart/r", copy_v, CopyConfig(output_path_of(scribbler), "apart.r", counter_dir))]


def lease_left(config: NodeConfig, output_path: str) -> None:
    """Write how many seconds the lease this step runs under has left (``lease.txt``)."""
    from rigging.lease import current_lease

    held = current_lease(fs.join(output_path, ".marin"))
    assert held is not None, "the runner holds no lease while its step runs"
    fs.atomic_write(fs.join(output_path, "lease.txt"), str(held.expires_at - time.time()))


def call_log(counter_dir: str) -> list[tuple[str, int]]:
    """Every call counted so far, in order: (its label, the pid of the process that made it)."""
    path = os.path.join(counter_dir, CALLS_FILE)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [(label, int(pid)) for label, pid in (line.rsplit(maxsplit=1) for line in f if line.strip())]


def calls(counter_dir: str) -> collections.Counter[str]:
    """How many times each label's function ran, counted across processes."""
    return collections.Counter(label for label, _pid in call_log(counter_dir))


def node(name: str, counter_dir: str = "", *deps: Step, **kwargs: Any) -> Step:
    """A :func:`record` step named ``name`` reading the outputs of ``deps``."""
    version = kwargs.pop("version", "v1")
    resources = kwargs.pop("resources", None)
    cfg = NodeConfig(label=name.replace("/", "."), inputs=tuple(output_path_of(d) for d in deps),
                     counter_dir=counter_dir, **kwargs)
    return Step(name=name, fn=record, config=cfg, version=version, resources=resources)


def diamond(counter_dir: str = "", **overrides: Mapping[str, Any]) -> dict[str, Step]:
    """``a -> b, a -> c, (b, c) -> d`` plus an independent ``e``; ``overrides[name]`` = kwargs."""
    def kw(name: str) -> dict[str, Any]:
        return dict(overrides.get(name, {}))

    a = node("g/a", counter_dir, **kw("a"))
    b = node("g/b", counter_dir, a, **kw("b"))
    c = node("g/c", counter_dir, a, **kw("c"))
    d = node("g/d", counter_dir, b, c, **kw("d"))
    e = node("g/e", counter_dir, **kw("e"))
    return {"a": a, "b": b, "c": c, "d": d, "e": e}


def built_diamond(prefix: str) -> dict[str, str]:
    """:func:`diamond` built under ``prefix`` by the API (which registers no persistent root):
    {step name: output name}."""
    # Imported here: step processes import this module to run its functions, and need no runner.
    from marin.execution.core.step import output_name_of
    from marin.execution.run.runner import StepRunner

    g = diamond()
    result = StepRunner(prefix=prefix, max_parallel=2, client=InProcessClient()).run([g["d"], g["e"]])
    assert result.ok
    return {s.name: output_name_of(s.name, s.hash) for s in result.steps}


def done_steps(prefix: str, names: Mapping[str, str]) -> set[str]:
    """The steps of ``names`` ({step name: output name}) whose outputs under ``prefix`` are done."""
    from marin.execution.store.step_record import StepRecord  # see built_diamond

    return {step for step, output in names.items() if StepRecord(fs.join(prefix, output)).is_done()}


class Color(enum.Enum):
    """An enum for configs (enums hash by class and value)."""

    RED = "red"
    BLUE = "blue"


def noop(config: Any, output_path: str) -> None:
    """A step that does nothing (for large synthetic graphs)."""


@dataclass(frozen=True)
class LinkConfig:
    """One link of a synthetic chain."""

    i: int
    prev: Any = None


def chain(n: int) -> list[Step]:
    """``n`` steps, each depending on the one before."""
    steps: list[Step] = []
    prev = None
    for i in range(n):
        prev = Step(name=f"chain/s{i}", fn=noop, config=LinkConfig(i, output_path_of(prev) if prev else None))
        steps.append(prev)
    return steps


def print_hashes(module_name: str) -> None:
    """Print ``name hash`` for every step of ``module_name``'s graph (run in a subprocess)."""
    import importlib

    from marin.execution.core.graph import collect_graph

    module = importlib.import_module(module_name)
    for step in collect_graph(module.steps):
        print(step.name, step.hash)


if __name__ == "__main__":
    print_hashes(sys.argv[1])


@dataclass(frozen=True)
class Inner:
    """A dataclass nested in a config."""

    path: Any


@dataclass(frozen=True)
class EveryContainer:
    """One placeholder in each container kind a config may hold."""

    in_list: list
    in_tuple: tuple
    in_dict: dict
    in_set: set
    in_frozenset: frozenset
    in_dataclass: Inner


def every_container(upstream: Mapping[str, Step]) -> EveryContainer:
    """An :class:`EveryContainer` whose field ``in_<kind>`` refers to ``upstream[<kind>]``."""
    p = {kind: output_path_of(step) for kind, step in upstream.items()}
    return EveryContainer(in_list=[p["list"]], in_tuple=(p["tuple"],), in_dict={"k": p["dict"]},
                          in_set={p["set"]}, in_frozenset=frozenset({p["frozenset"]}),
                          in_dataclass=Inner(p["dataclass"]))


def describe_containers(config: EveryContainer, output_path: str) -> None:
    """Write what ``fn`` received: for each field, its container type and the values inside."""
    found = {
        "in_list": (type(config.in_list).__name__, list(config.in_list)),
        "in_tuple": (type(config.in_tuple).__name__, list(config.in_tuple)),
        "in_dict": (type(config.in_dict).__name__, list(config.in_dict.values())),
        "in_set": (type(config.in_set).__name__, sorted(config.in_set, key=repr)),
        "in_frozenset": (type(config.in_frozenset).__name__, sorted(config.in_frozenset, key=repr)),
        "in_dataclass": (type(config.in_dataclass).__name__, [config.in_dataclass.path]),
    }
    described = {k: [kind, [v if isinstance(v, str) else f"<{type(v).__name__}>" for v in values]]
                 for k, (kind, values) in found.items()}
    fs.atomic_write(fs.join(output_path, "received.json"), json.dumps(described))


def leak_token(config: NodeConfig, output_path: str) -> None:
    """Print the secret's value, as a careless step would; fail naming it too if ``config.fail``."""
    if config.token is None:
        raise ValueError("leak_token needs config.token")
    value = config.token.get()
    print(f"using token {value}", flush=True)
    if config.fail:
        raise RuntimeError(f"the server refused token {value}")
    fs.atomic_write(fs.join(output_path, "out.txt"), "ok")


# -- steps whose duration is known (estimates) -------------------------------------------------


@dataclass(frozen=True)
class TimedConfig:
    """Config of :func:`timed`: ``startup + num_train_steps * seconds_per_step`` seconds of work.

    Attributes:
        num_train_steps: the work; :func:`timed` names it in its traits so estimates scale by it.
        seconds_per_step: seconds each unit of work takes.
        startup: seconds before the first unit.
        inputs: placeholders of upstream outputs.
        payload: what ``out.txt`` holds (so two configs can make the same output).
    """

    num_train_steps: int = 1
    seconds_per_step: float = 0.0
    startup: float = 0.0
    inputs: tuple[Any, ...] = ()
    payload: str = "same"


@step_function(StepTraits(scale_fields=("num_train_steps",)))
def timed(config: TimedConfig, output_path: str) -> None:
    """Sleep as long as the config says, then write ``out.txt``."""
    time.sleep(config.startup + config.num_train_steps * config.seconds_per_step)
    fs.atomic_write(fs.join(output_path, "out.txt"), config.payload)


def timed_step(name: str, *deps: Step, version: str = "v1", resources: Any = None, **kwargs: Any) -> Step:
    """A :func:`timed` step named ``name`` reading ``deps``."""
    return Step(name=name, fn=timed, config=TimedConfig(inputs=tuple(output_path_of(d) for d in deps), **kwargs),
                version=version, resources=resources)


@dataclass(frozen=True)
class ProgressingConfig:
    """Config of :func:`progressing`: ``units`` units of ``seconds_per_unit`` each."""

    units: int = 10
    seconds_per_unit: float = 0.1


def progressing(config: ProgressingConfig, output_path: str) -> None:
    """Work through the units, writing a progress record as it goes (as a training loop does)."""
    from rigging.progress import ProgressWriter

    writer = ProgressWriter(output_path, total=config.units, unit="step", interval=0.0)
    for i in range(config.units):
        time.sleep(config.seconds_per_unit)
        writer.update(i + 1, loss=10.0 / (i + 1), tokens_per_s=2048.0)
    fs.atomic_write(fs.join(output_path, "out.txt"), "done")


def noisy(config: NodeConfig, output_path: str) -> None:
    """A nondeterministic step: ``data.txt`` is the same every time, ``noise.bin`` never is."""
    fs.atomic_write(fs.join(output_path, "data.txt"), config.label)
    fs.atomic_write(fs.join(output_path, "noise.bin"), os.urandom(16))


# -- warm workers: what one step leaves behind must not reach the next ---------------------------

_LEFT_BEHIND: list[str] = []


@dataclass(frozen=True)
class WarmConfig:
    """What a warm-worker test step does: ``"leak"`` (a module global and a thread left
    running), ``"look"`` (record what it can see), or ``"crash"`` (its process dies mid-step)."""

    action: str
    tag: str = ""


def warm_step(config: WarmConfig, output_path: str) -> None:
    import threading

    if config.action == "leak":
        _LEFT_BEHIND.append(config.tag)
        threading.Thread(target=time.sleep, args=(3600,), name=f"leaked-{config.tag}", daemon=True).start()
    elif config.action == "crash":
        fs.atomic_write(fs.join(output_path, "partial.txt"), "half")
        os._exit(9)
    seen = {"pid": os.getpid(), "ppid": os.getppid(), "globals": list(_LEFT_BEHIND),
            "threads": sorted(t.name for t in threading.enumerate())}
    fs.atomic_write(fs.join(output_path, "seen.json"), json.dumps(seen))


# -- steps whose outputs decide more steps (expansion) --------------------------------------------


@dataclass(frozen=True)
class FanConfig:
    """Config of :func:`fan`: it writes ``width``; its expansion is that many :func:`fan_item` steps
    (and, while ``depth`` > 0, another fan one level down, ``width + 1`` wide).

    Attributes:
        width: how many items this level expands into.
        depth: how many more levels below this one.
        item_sleep: seconds the first two items of this level sleep on their first call (a runner can
            be killed meanwhile).
        broken: its expansion raises (the step itself builds).
        counter_dir: where calls are counted (not hashed).
    """

    width: int
    depth: int = 0
    item_sleep: float = 0.0
    broken: bool = False
    counter_dir: str = unhashed_field(default="")


@dataclass(frozen=True)
class FanItemConfig:
    """Config of :func:`fan_item`: it writes ``index * index``."""

    label: str
    index: int
    sleep: float = 0.0
    counter_dir: str = unhashed_field(default="")


def _fan_expand(step: Step, output_path: str) -> list[Step]:
    config = step.config
    if config.broken:
        raise ValueError("no such width")
    width = json.loads(fs.read_text(fs.join(output_path, "fan.json")))["width"]
    items = [Step(f"{step.name}/item-{i}", fan_item,
                  FanItemConfig(f"{step.name}/item-{i}".replace("/", "."), i, config.item_sleep if i < 2 else 0.0,
                                config.counter_dir))
             for i in range(width)]
    if config.depth > 0:
        below = FanConfig(width=width + 1, depth=config.depth - 1, counter_dir=config.counter_dir)
        items.append(Step(f"{step.name}/next", fan, below))
    return items


@step_function(StepTraits(expand=_fan_expand))
def fan(config: FanConfig, output_path: str) -> None:
    """An expanding step: its output (``fan.json``) decides how many items are built."""
    _count(config.counter_dir, "fan" if config.depth else "fan.leaf")
    fs.atomic_write(fs.join(output_path, "fan.json"), json.dumps({"width": config.width}))


def fan_item(config: FanItemConfig, output_path: str) -> None:
    _count(config.counter_dir, config.label)
    if config.sleep and _count(config.counter_dir, config.label + ".slept") == 1:
        time.sleep(config.sleep)
    fs.atomic_write(fs.join(output_path, "out.txt"), str(config.index * config.index))


@dataclass(frozen=True)
class GatherConfig:
    """Config of :func:`gather`: the fan whose expansion it sums."""

    fan: Any
    counter_dir: str = unhashed_field(default="")


def gather(config: GatherConfig, output_path: str) -> None:
    """Sums what every item the fan expanded into (at every depth) wrote; runs after all of them."""
    from marin.execution.run.worker import current_step

    _count(config.counter_dir, "gather")
    running = current_step()
    assert running is not None
    found = running.expanded(config.fan)
    items = [path for name, path in found if "/item-" in name]
    total = sum(int(fs.read_text(fs.join(path, "out.txt"))) for path in items)
    fs.atomic_write(fs.join(output_path, "total.json"), json.dumps({"items": len(items), "total": total}))


def fan_graph(counter_dir: str = "", width: int = 3, depth: int = 1, item_sleep: float = 0.0,
              broken: bool = False) -> dict[str, Step]:
    """``fan/root`` (expanding, ``depth`` levels below it) and ``fan/gather`` reading it."""
    root = Step("fan/root", fan, FanConfig(width=width, depth=depth, item_sleep=item_sleep, broken=broken,
                                           counter_dir=counter_dir))
    return {"root": root, "gather": Step("fan/gather", gather, GatherConfig(output_path_of(root), counter_dir))}


# -- a step that runs until it is stopped (lost leases) -------------------------------------------


@dataclass(frozen=True)
class TickConfig:
    """Config of :func:`ticker`: on its first call (its first ``hosts`` calls: one per host of a
    multi-host step) it writes its pid (``ticker.pid``, then ``ticker-<n>.pid``), then a tick file
    every 20 ms for ``seconds``; later calls finish at once."""

    seconds: float = 60.0
    hosts: int = 1
    counter_dir: str = unhashed_field(default="")


def ticker(config: TickConfig, output_path: str) -> None:
    n = _count(config.counter_dir, "ticker")
    if n <= config.hosts:
        name = "ticker.pid" if n == 1 else f"ticker-{n}.pid"
        fs.atomic_write(os.path.join(config.counter_dir, name), str(os.getpid()))
        deadline = time.monotonic() + config.seconds
        while time.monotonic() < deadline:
            fs.atomic_write(os.path.join(config.counter_dir, "ticker.tick"), repr(time.time()), durable=False)
            time.sleep(0.02)
    fs.atomic_write(fs.join(output_path, "out.txt"), "done")


@dataclass(frozen=True)
class ResumableConfig:
    """Config of :func:`resumable`: ``units`` units of ``seconds_per_unit``, each committed to the
    output as it is done (``unit-<i>``), so a later attempt continues where an earlier one stopped."""

    units: int = 20
    seconds_per_unit: float = 0.2
    after: Any = None
    counter_dir: str = unhashed_field(default="")


def resumable(config: ResumableConfig, output_path: str) -> None:
    _count(config.counter_dir, "resumable")
    for i in range(config.units):
        unit = fs.join(output_path, f"unit-{i:03d}")
        if fs.exists(unit):
            continue  # committed by an earlier attempt: not done again
        time.sleep(config.seconds_per_unit)
        _count(config.counter_dir, f"resumable.unit.{i:03d}")  # the unit's work, done; its commit follows
        fs.atomic_write(unit, str(i))
    fs.atomic_write(fs.join(output_path, "out.txt"), "done")


# -- a step whose build continues the newest earlier build (plan_start) ---------------------------


@dataclass(frozen=True)
class ContinueConfig:
    """Config of :func:`continue_newest`."""

    value: int


def _continue_from_newest(step: Step, hashes: Mapping[int, str], earlier_builds: Any) -> Start | None:
    """Continue the newest earlier build of the step's name (as a training run extends one)."""
    earlier = earlier_builds(step.name)
    if not earlier:
        return None
    path, _provenance = earlier[0]
    return Start(f"continues {os.path.basename(path)}", extends=path, step=1)


@step_function(StepTraits(plan_start=_continue_from_newest))
def continue_newest(config: ContinueConfig, output_path: str) -> None:
    """Writes where it was told to start (``current_step().start``), which the plan decided."""
    from marin.execution.run.worker import current_step

    running = current_step()
    assert running is not None
    start = running.start.to_json() if running.start is not None else None
    fs.atomic_write(fs.join(output_path, "start.json"), json.dumps({"value": config.value, "start": start}))


def summarised(config: NodeConfig, output_path: str) -> None:
    """A data step in the shape of a curation step: a shard and its ``_summary.json`` of counts."""
    from marin.processing.attributes import write_summary

    fs.atomic_write(fs.join(output_path, "docs-00000.jsonl"), json.dumps({"id": "a", "text": config.label}) + "\n")
    write_summary(output_path, {"step": "heuristics", "documents": 12345, "passed": 12000, "mean_score": 0.25})


def scored(config: Any, output_path: str) -> None:
    """An evaluation's results, as an eval step writes them (``eval_results.json``)."""
    from levanter.eval_harness.scores import TaskScores
    from marin.experiment.evaluation.results import EvalResults, write_eval_results

    write_eval_results(output_path, EvalResults(
        model=str(config.model), checkpoint="final", step=10, datasets={"held-out": {"loss": 2.5, "bits_per_byte": 1.25}},
        tasks={"story_qa": TaskScores(metrics={"acc": 0.625}, stderr={"acc": 0.125})}))
