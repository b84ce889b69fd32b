"""An event simulation of scheduling a step graph on a cluster of identical hosts.

It uses the same :class:`~iris.admission.Ledger` per host and the same plan-time check as real
admission, so what it shows about capacity holds for them: a step starts only on hosts whose
ledgers take its per-host demand, a multi-host step takes all its hosts at once (gang), and a
step that fits no host is refused before the simulation starts. A runner that also caps how many
steps run at once (``max_parallel``) and starts ready steps in its own order
(:attr:`Priority.GIVEN_ORDER`) is simulated as it runs: marin's plan estimates are this simulation.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iris.admission import Demand, Ledger, MachineCapacity, ResourcesTooLarge, check_fits
from iris.cluster import ResourceConfig

__all__ = ["Placement", "Priority", "SimCluster", "SimResult", "SimStep", "critical_path", "simulate", "work_bound"]


class Priority(enum.Enum):
    """Which ready step starts first when several could."""

    CRITICAL_PATH = "critical path"  # the longest remaining chain first (list scheduling)
    GIVEN_ORDER = "given order"  # the order the steps were given in (a runner's plan order)


@dataclass(frozen=True)
class SimStep:
    """One step of the simulated graph.

    Attributes:
        name: unique name.
        resources: what it asks for (per host; it spans ``resources.num_hosts`` hosts).
        duration: how long it runs once started (0: it ends as it starts).
        deps: names of steps that must finish first.
    """

    name: str
    resources: ResourceConfig
    duration: float
    deps: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.duration >= 0:
            raise ValueError(f"duration of {self.name!r} must be >= 0, got {self.duration!r}")


@dataclass(frozen=True)
class SimCluster:
    """Identical hosts.

    Attributes:
        num_hosts: how many.
        host: what each offers.
    """

    num_hosts: int
    host: MachineCapacity

    def __post_init__(self) -> None:
        if self.num_hosts < 1:
            raise ValueError(f"num_hosts must be >= 1, got {self.num_hosts!r}")


@dataclass(frozen=True)
class Placement:
    """Where and when one step ran.

    Attributes:
        step: its name.
        start: start time.
        end: end time.
        hosts: indices of the hosts it held.
    """

    step: str
    start: float
    end: float
    hosts: tuple[int, ...]


@dataclass(frozen=True)
class SimResult:
    """The outcome.

    Attributes:
        makespan: when the last step finished.
        placements: one per step, in start order.
        critical_path: the longest chain of durations (a lower bound on the makespan).
        work_bound: for the scarcest resource, total work divided by cluster capacity (another bound).
    """

    makespan: float
    placements: tuple[Placement, ...]
    critical_path: float
    work_bound: float

    @property
    def lower_bound(self) -> float:
        return max(self.critical_path, self.work_bound)


def _topological(steps: Sequence[SimStep]) -> list[SimStep]:
    by_name = {s.name: s for s in steps}
    if len(by_name) != len(steps):
        raise ValueError("step names must be unique")
    for s in steps:
        for d in s.deps:
            if d not in by_name:
                raise ValueError(f"step {s.name!r} depends on unknown step {d!r}")
    indegree = {s.name: len(s.deps) for s in steps}
    users: dict[str, list[str]] = {s.name: [] for s in steps}
    for s in steps:
        for d in s.deps:
            users[d].append(s.name)
    ready = [n for n, k in indegree.items() if k == 0]
    order = []
    while ready:
        n = ready.pop()
        order.append(by_name[n])
        for u in users[n]:
            indegree[u] -= 1
            if indegree[u] == 0:
                ready.append(u)
    if len(order) != len(steps):
        raise ValueError("the step graph has a cycle")
    return order


def _bottom_levels(order: list[SimStep]) -> dict[str, float]:
    """Longest path from each step to the end of the graph, its own duration included."""
    users: dict[str, list[str]] = {s.name: [] for s in order}
    for s in order:
        for d in s.deps:
            users[d].append(s.name)
    level: dict[str, float] = {}
    for s in reversed(order):
        level[s.name] = s.duration + max((level[u] for u in users[s.name]), default=0.0)
    return level


def critical_path(steps: Sequence[SimStep]) -> float:
    """The length of the longest chain of dependent steps."""
    return max(_bottom_levels(_topological(steps)).values(), default=0.0)


def work_bound(steps: Sequence[SimStep], cluster: SimCluster) -> float:
    """Max over resources of (sum of duration x amount asked) / cluster capacity."""
    bounds = [0.0]
    for field in ("cpus", "memory", "gpus", "tpu_chips"):
        capacity = getattr(cluster.host, field) * cluster.num_hosts
        if capacity <= 0:
            continue
        work = sum(s.duration * getattr(cluster.host.per_host(s.resources), field) * s.resources.num_hosts for s in steps)
        bounds.append(work / capacity)
    return max(bounds)


def simulate(steps: Sequence[SimStep], cluster: SimCluster, *, max_parallel: int | None = None,
             priority: Priority = Priority.CRITICAL_PATH, running: Mapping[str, float] | None = None) -> SimResult:
    """Run the graph on the cluster: at every event (a step finishing) the ready steps are
    considered in ``priority`` order and each one that fits is started (later, smaller steps may
    fill gaps a larger one cannot use).

    Args:
        max_parallel: at most this many steps at once (None: as many as fit).
        priority: which ready step is considered first.
        running: steps of ``steps`` already running, with the seconds they have left: they hold
            their hosts and a slot from the start, and their dependents wait for them.

    Raises:
        ResourcesTooLarge: a step fits no host, or spans more hosts than the cluster has.
        ValueError: ``max_parallel`` below 1, or ``running`` names an unknown step.
    """
    if max_parallel is not None and max_parallel < 1:
        raise ValueError(f"max_parallel must be >= 1, got {max_parallel}")
    running = dict(running or {})
    order = _topological(steps)
    _check_can_run(order, cluster, running)
    level = _bottom_levels(order)
    given = {s.name: i for i, s in enumerate(steps)}
    rank = ((lambda s: (-level[s.name], s.name)) if priority is Priority.CRITICAL_PATH
            else (lambda s: (given[s.name],)))
    ledgers = [Ledger(cluster.host) for _ in range(cluster.num_hosts)]
    waiting = {s.name: len(s.deps) for s in order}
    users = _dependents(order)
    ready = [s for s in order if not s.deps and s.name not in running]
    active: list[tuple[float, int, SimStep, tuple[int, ...]]] = []
    seq = itertools.count()
    placements: list[Placement] = []
    by_name = {s.name: s for s in order}
    for name, left in sorted(running.items()):
        s = by_name[name]
        hosts = _place(cluster.host.per_host(s.resources), s.resources.num_hosts, ledgers)
        if hosts is None:
            raise ResourcesTooLarge(f"running step {name!r} does not fit beside the other running steps")
        heapq.heappush(active, (max(0.0, left), next(seq), s, hosts))
        placements.append(Placement(name, 0.0, max(0.0, left), hosts))
    now = 0.0
    while ready or active:
        ready.sort(key=rank)
        still_ready = []
        # What found too few hosts this round still would later in it (the round only takes hosts):
        # not asked of every host again for each ready step that wants the same.
        cannot: set[tuple[Demand, int]] = set()
        for s in ready:
            key = (cluster.host.per_host(s.resources), s.resources.num_hosts)
            full = max_parallel is not None and len(active) >= max_parallel
            hosts = None if full or key in cannot else _place(*key, ledgers)
            if hosts is None:
                cannot.add(key)
                still_ready.append(s)
                continue
            heapq.heappush(active, (now + s.duration, next(seq), s, hosts))
            placements.append(Placement(s.name, now, now + s.duration, hosts))
        ready = still_ready
        if not active:
            raise RuntimeError(f"nothing runs and {len(ready)} steps cannot start")  # unreachable after checks
        now = active[0][0]
        while active and active[0][0] <= now:
            _, _, s, hosts = heapq.heappop(active)
            demand = cluster.host.per_host(s.resources)
            for i in hosts:
                ledgers[i].give_back(demand)
            for u in users[s.name]:
                waiting[u.name] -= 1
                if waiting[u.name] == 0 and u.name not in running:
                    ready.append(u)
    return SimResult(
        makespan=now,
        placements=tuple(placements),
        critical_path=max(level.values(), default=0.0),
        work_bound=work_bound(steps, cluster),
    )


def _check_can_run(order: Sequence[SimStep], cluster: SimCluster, running: Mapping[str, float]) -> None:
    """Raise unless every step fits the cluster and every running step is one of ``order``."""
    unknown = sorted(set(running) - {s.name for s in order})
    if unknown:
        raise ValueError(f"running steps {unknown} are not in the graph")
    for s in order:
        if s.resources.num_hosts > cluster.num_hosts:
            raise ResourcesTooLarge(
                f"step {s.name!r} spans {s.resources.num_hosts} hosts; the cluster has {cluster.num_hosts}"
            )
        check_fits(s.resources, cluster.host, what=f"a host (for step {s.name!r})", demand=cluster.host.per_host(s.resources))


def _dependents(order: Sequence[SimStep]) -> dict[str, list[SimStep]]:
    """Step name -> the steps that depend on it."""
    users: dict[str, list[SimStep]] = {s.name: [] for s in order}
    for s in order:
        for d in s.deps:
            users[d].append(s)
    return users


def _place(demand: Demand, num_hosts: int, ledgers: list[Ledger]) -> tuple[int, ...] | None:
    """Take ``num_hosts`` hosts from ``ledgers`` (the first that can take the per-host ``demand``),
    or None, taking nothing, when too few can."""
    # The first hosts that can take it, no more asked (every host is asked for every placement otherwise).
    able = (i for i, ledger in enumerate(ledgers) if ledger.can_take(demand))
    hosts = list(itertools.islice(able, num_hosts))
    if len(hosts) < num_hosts:
        return None
    for i in hosts:
        ledgers[i].take(demand)
    return tuple(hosts)
