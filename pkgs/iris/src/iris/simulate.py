"""An event simulation of scheduling a step graph on a cluster of identical hosts.

It uses the same :class:`~iris.admission.Ledger` per host and the same plan-time check as real
admission, so what it shows about capacity holds for them: a step starts only on hosts whose
ledgers take its per-host demand, a multi-host step takes all its hosts at once (gang), and a
step that fits no host is refused before the simulation starts.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from iris.admission import Demand, Ledger, MachineCapacity, ResourcesTooLarge, check_fits
from iris.cluster import ResourceConfig

__all__ = ["Placement", "SimCluster", "SimResult", "SimStep", "critical_path", "simulate", "work_bound"]


@dataclass(frozen=True)
class SimStep:
    """One step of the simulated graph.

    Attributes:
        name: unique name.
        resources: what it asks for (per host; it spans ``resources.num_hosts`` hosts).
        duration: how long it runs once started.
        deps: names of steps that must finish first.
    """

    name: str
    resources: ResourceConfig
    duration: float
    deps: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.duration > 0:
            raise ValueError(f"duration of {self.name!r} must be > 0, got {self.duration!r}")


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
        work = sum(s.duration * getattr(Demand.per_host(s.resources), field) * s.resources.num_hosts for s in steps)
        bounds.append(work / capacity)
    return max(bounds)


def simulate(steps: Sequence[SimStep], cluster: SimCluster) -> SimResult:
    """Run the graph on the cluster, list-scheduling ready steps by longest remaining path first.

    At every event (a step finishing) the ready steps are considered in priority order and each
    one that fits is started (later, smaller steps may fill gaps a larger one cannot use).

    Raises:
        ResourcesTooLarge: a step fits no host, or spans more hosts than the cluster has.
    """
    order = _topological(steps)
    for s in order:
        if s.resources.num_hosts > cluster.num_hosts:
            raise ResourcesTooLarge(
                f"step {s.name!r} spans {s.resources.num_hosts} hosts; the cluster has {cluster.num_hosts}"
            )
        check_fits(s.resources, cluster.host, what=f"a host (for step {s.name!r})", demand=Demand.per_host(s.resources))
    level = _bottom_levels(order)
    ledgers = [Ledger(cluster.host) for _ in range(cluster.num_hosts)]
    waiting = {s.name: len(s.deps) for s in order}
    users: dict[str, list[SimStep]] = {s.name: [] for s in order}
    for s in order:
        for d in s.deps:
            users[d].append(s)
    ready = [s for s in order if not s.deps]
    running: list[tuple[float, int, SimStep, tuple[int, ...]]] = []
    seq = itertools.count()
    placements: list[Placement] = []
    now = 0.0
    while ready or running:
        ready.sort(key=lambda s: (-level[s.name], s.name))
        still_ready = []
        for s in ready:
            demand = Demand.per_host(s.resources)
            hosts = [i for i, ledger in enumerate(ledgers) if ledger.can_take(demand)][: s.resources.num_hosts]
            if len(hosts) < s.resources.num_hosts:
                still_ready.append(s)
                continue
            for i in hosts:
                ledgers[i].take(demand)
            heapq.heappush(running, (now + s.duration, next(seq), s, tuple(hosts)))
            placements.append(Placement(s.name, now, now + s.duration, tuple(hosts)))
        ready = still_ready
        if not running:
            raise RuntimeError(f"nothing runs and {len(ready)} steps cannot start")  # unreachable after checks
        now = running[0][0]
        while running and running[0][0] <= now:
            _, _, s, hosts = heapq.heappop(running)
            demand = Demand.per_host(s.resources)
            for i in hosts:
                ledgers[i].give_back(demand)
            for u in users[s.name]:
                waiting[u.name] -= 1
                if waiting[u.name] == 0:
                    ready.append(u)
    return SimResult(
        makespan=now,
        placements=tuple(placements),
        critical_path=max(level.values(), default=0.0),
        work_bound=work_bound(steps, cluster),
    )
