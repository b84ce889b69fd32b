from __future__ import annotations

import threading
import time

import pytest

from fray.cluster import LocalClient
from iris.admission import AdmissionController, Demand, MachineCapacity, ResourcesTooLarge
from iris.cluster import ResourceConfig
from testsupport.fray_jobs import sleep_then_return

TWO_CPUS = MachineCapacity(cpus=2, memory=8 * 2**30)


def test_a_job_bigger_than_the_machine_fails_at_check_time():
    controller = AdmissionController(TWO_CPUS)
    with pytest.raises(ResourcesTooLarge, match=r"cpus: 64 > 2"):
        controller.check_fits(ResourceConfig.with_cpu(64))
    with pytest.raises(ResourcesTooLarge, match="memory"):
        controller.check_fits(ResourceConfig.with_cpu(1, memory="64GiB"))
    with pytest.raises(ResourcesTooLarge, match="tpu_chips: 8 > 0"):
        controller.check_fits(ResourceConfig.with_tpu("v5e-8"))
    # admit never waits for what can never come
    with pytest.raises(ResourcesTooLarge):
        controller.admit(ResourceConfig.with_cpu(64), timeout=None)


def test_a_multi_host_job_run_locally_needs_all_its_hosts_here():
    controller = AdmissionController(MachineCapacity(cpus=4, memory=2**30))
    assert Demand.total(ResourceConfig.with_cpu(2, hosts=3)).cpus == 6
    with pytest.raises(ResourcesTooLarge, match="cpus: 6 > 4"):
        controller.check_fits(ResourceConfig.with_cpu(2, hosts=3))


def test_try_admit_refuses_while_full_and_releases():
    controller = AdmissionController(TWO_CPUS)
    first = controller.try_admit(ResourceConfig.with_cpu(2))
    assert first is not None
    assert controller.try_admit(ResourceConfig.with_cpu(1)) is None
    first.release()
    first.release()  # idempotent
    assert controller.in_use == Demand()
    with controller.try_admit(ResourceConfig.with_cpu(1)) as a, controller.try_admit(ResourceConfig.with_cpu(1)) as b:
        assert a is not None and b is not None
        assert controller.in_use.cpus == 2
    assert controller.in_use.cpus == 0


def test_admit_times_out_when_no_room():
    controller = AdmissionController(TWO_CPUS)
    held = controller.admit(ResourceConfig.with_cpu(2))
    with pytest.raises(TimeoutError):
        controller.admit(ResourceConfig.with_cpu(1), timeout=0.2)
    held.release()


def test_two_jobs_that_each_want_two_cpus_run_one_after_the_other():
    """Real processes: each job holds 2 of 2 CPUs, so their run intervals must not overlap."""
    controller = AdmissionController(TWO_CPUS)
    resources = ResourceConfig.with_cpu(2)
    intervals: list[tuple[float, float]] = []
    lock = threading.Lock()
    client = LocalClient()

    def run_one(i: int) -> None:
        with controller.admit(resources, timeout=60):
            start = time.monotonic()
            assert controller.in_use.cpus <= TWO_CPUS.cpus
            client.submit(sleep_then_return, 0.5, i, name=f"job-{i}", resources=resources).result(timeout=60)
            end = time.monotonic()
        with lock:
            intervals.append((start, end))

    threads = [threading.Thread(target=run_one, args=(i,)) for i in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        client.shutdown()
    assert len(intervals) == 2
    (s1, e1), (s2, e2) = sorted(intervals)
    assert e1 <= s2, f"jobs overlapped: {intervals}"
    assert controller.in_use == Demand()


def test_many_threads_never_exceed_capacity():
    controller = AdmissionController(MachineCapacity(cpus=3, memory=3 * 2**30))
    peak = {"cpus": 0.0, "memory": 0}
    lock = threading.Lock()
    requests = [ResourceConfig.with_cpu(c, memory=f"{m}GiB") for c, m in [(1, 1), (2, 1), (3, 3), (1, 2)] * 6]

    def worker(r: ResourceConfig) -> None:
        with controller.admit(r, timeout=60):
            used = controller.in_use
            with lock:
                peak["cpus"] = max(peak["cpus"], used.cpus)
                peak["memory"] = max(peak["memory"], used.memory)
            time.sleep(0.005)

    threads = [threading.Thread(target=worker, args=(r,)) for r in requests]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert peak["cpus"] <= 3 and peak["memory"] <= 3 * 2**30
    assert peak["cpus"] >= 2, "admission never ran two jobs at once"
    assert controller.in_use == Demand()


def test_a_cluster_refuses_by_name_what_no_host_or_too_few_hosts_can_take():
    from iris.admission import check_fits_cluster

    hosts = [MachineCapacity(cpus=2, memory=8 * 2**30), MachineCapacity(cpus=4, memory=8 * 2**30),
             MachineCapacity(cpus=4, memory=64 * 2**30)]
    check_fits_cluster(ResourceConfig.with_cpu(4, memory="32GiB"), hosts)  # the third host
    check_fits_cluster(ResourceConfig.with_cpu(2, hosts=3), hosts)  # one process per host
    with pytest.raises(ResourcesTooLarge, match=r"no host of the cluster \(3 hosts\).*cpus: 8 > 4"):
        check_fits_cluster(ResourceConfig.with_cpu(8), hosts)
    with pytest.raises(ResourcesTooLarge, match="spans 3 hosts but only 2 of the cluster's 3 hosts"):
        check_fits_cluster(ResourceConfig.with_cpu(3, hosts=3), hosts)
    with pytest.raises(ResourcesTooLarge, match="gpus: 1 > 0"):
        check_fits_cluster(ResourceConfig.with_gpu("H100", 1), hosts)
