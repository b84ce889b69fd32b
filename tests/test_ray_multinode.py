"""The runner on a Ray cluster of several nodes on this machine (``ray.cluster_utils.Cluster``:
one raylet per node, each with its own CPUs): steps spread over nodes by what they ask for, a
two-host step placed STRICT_SPREAD over two nodes forms one JAX job, a step whose node is
removed mid-run is retried on another, and the plan refuses a step bigger than the cluster.

One cluster (three 1-CPU nodes and a head with none) serves the module; starting it takes tens of
seconds on two busy cores, so the whole module is marked slow and kept on one xdist worker (one
cluster, not one per worker that draws a test of it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import psutil
import pytest

from iris.admission import ResourcesTooLarge
from iris.cluster import ResourceConfig
from marin.execution.core.step import Step
from marin.execution.run.outcome import Outcome
from marin.execution.run.runner import StepRunner
from marin.execution.store.records import StepRecord
from rigging import filesystem as fs
from rigging.config.discovery import Backend
from testsupport.levanter_data import cpu_device_env
from testsupport.ray_cluster import NODE_ENV, ray_multinode

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray-multinode")]

NODES = ("a", "b", "c")


@pytest.fixture(scope="module")
def cluster():
    import ray

    if ray.is_initialized():
        ray.shutdown()  # a connection left by an earlier module: this module needs its own cluster
    with pytest.MonkeyPatch.context() as mp:
        # Node processes inherit this environment: JAX on CPU, one device per process, compiled with
        # the session's settings (the device count is added to them, not put in their place).
        env = cpu_device_env(1)
        mp.setenv("JAX_PLATFORMS", env["JAX_PLATFORMS"])
        mp.setenv("XLA_FLAGS", env["XLA_FLAGS"])
        with ray_multinode({name: {"num_cpus": 1} for name in NODES}) as c:
            yield c


def _runner(prefix: str, address: str) -> StepRunner:
    return StepRunner(prefix=prefix, max_parallel=3, strict_env=False, backend=Backend.RAY, ray_address=address,
                      poll_interval=0.05)


@dataclass(frozen=True)
class MeetConfig:
    """Steps that wait for each other: each records its node, then waits until ``expect`` have."""

    rendezvous: str
    tag: str
    expect: int = 2


def meet(config: MeetConfig, output_path: str) -> None:
    node = os.environ.get(NODE_ENV, "?")
    fs.atomic_write(fs.join(config.rendezvous, f"{config.tag}.node"), node)
    deadline = time.time() + 120
    while len([n for n in os.listdir(config.rendezvous) if n.endswith(".node")]) < config.expect:
        assert time.time() < deadline, "the other step never started"
        time.sleep(0.1)
    fs.atomic_write(fs.join(output_path, "node.txt"), node)


def test_steps_that_run_together_spread_over_nodes_by_their_cpus(cluster, tmp_path):
    rendezvous = str(tmp_path / "meet")
    os.makedirs(rendezvous)
    steps = [Step(name=f"spread/{tag}", fn=meet, config=MeetConfig(rendezvous, tag),
                  resources=ResourceConfig(cpus=1)) for tag in ("x", "y")]
    runner = _runner(str(tmp_path / "store"), cluster.address)
    try:
        result = runner.run(steps)
    finally:
        runner.close()
    assert result.ok, result.failed
    nodes = {fs.read_text(fs.join(result.by_name(s.name).output_path, "node.txt")) for s in steps}
    # Each node has one CPU, and both steps ran at once: on two different nodes.
    assert len(nodes) == 2 and nodes <= set(NODES)


def jax_process(config: dict, output_path: str) -> None:
    """One process of a two-host step: join the JAX job, record where it ran and what it saw."""
    from testsupport.iris_jobs import data_parallel_loss_and_grad

    result = data_parallel_loss_and_grad(config["batch"], config["features"], config["seed"])
    result["node"] = os.environ.get(NODE_ENV, "?")
    fs.atomic_write(fs.join(output_path, f"process-{result['process_id']}.json"), json.dumps(result))


def test_a_two_host_step_is_placed_on_two_nodes_as_one_jax_job(cluster, tmp_path):
    step = Step(name="multinode/jax", fn=jax_process, config={"batch": 8, "features": 4, "seed": 0},
                resources=ResourceConfig.with_cpu(1, hosts=2))
    runner = _runner(str(tmp_path / "store"), cluster.address)
    try:
        result = runner.run([step])
    finally:
        runner.close()
    assert result.ok, result.failed
    out = result.by_name("multinode/jax").output_path
    seen = [json.loads(fs.read_text(fs.join(out, f"process-{i}.json"))) for i in range(2)]
    assert all(r["process_count"] == 2 and r["device_count"] == 2 for r in seen)
    assert seen[0]["loss"] == pytest.approx(seen[1]["loss"])  # one job: one global loss
    assert len({r["node"] for r in seen}) == 2  # STRICT_SPREAD: one process per node


def test_the_plan_refuses_a_step_bigger_than_the_cluster(cluster, tmp_path):
    runner = _runner(str(tmp_path / "store"), cluster.address)
    try:
        with pytest.raises(ResourcesTooLarge, match=r"step too/wide: .*no host of the Ray cluster .*cpus: 2 > 1"):
            runner.run([Step(name="too/wide", fn=meet, config=MeetConfig("", "w"), resources=ResourceConfig(cpus=2))])
        with pytest.raises(ResourcesTooLarge, match=r"step too/many-hosts: the job spans 4 hosts but only 3"):
            runner.run([Step(name="too/many-hosts", fn=jax_process, config={},
                             resources=ResourceConfig.with_cpu(1, hosts=4))])
    finally:
        runner.close()
    assert not os.path.exists(tmp_path / "store" / "too")  # refused before anything ran


@dataclass(frozen=True)
class VictimConfig:
    """The first attempt records its node and then runs until its node is taken away."""

    seconds: float = 180.0


def until_node_lost(config: VictimConfig, output_path: str) -> None:
    root = fs.strip_protocol(output_path)
    attempt = len([n for n in os.listdir(root) if n.startswith("attempt-")]) + 1
    fs.atomic_write(fs.join(output_path, f"attempt-{attempt}"), os.environ.get(NODE_ENV, "?"))
    if attempt == 1:
        time.sleep(config.seconds)
        raise RuntimeError("the node was never removed")


def test_the_soak_starts_a_runner_on_the_node_it_names_and_ends_it_there(cluster, tmp_path):
    # testsupport.soak.nodes: `python -m testsupport.soak --nodes N` places its runners this way.
    import ray

    from testsupport.soak.nodes import SoakNodes

    connected = not ray.is_initialized()
    if connected:
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        names = sorted(cluster.nodes)
        nodes = SoakNodes(ray, {n: cluster.nodes[n].node_id for n in names}, tmp_path)
        env = {"PATH": os.environ.get("PATH", "")}
        sleeper = nodes.start(names[-1], [sys.executable, "-c", "import time; time.sleep(120)"], env, str(tmp_path),
                              tmp_path / "sleeper.txt")
        # A child of a worker process of that node (its processes carry the node's name).
        assert psutil.Process(sleeper.pid).parent().environ().get(NODE_ENV) == names[-1]
        assert sleeper.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            sleeper.wait(timeout=0.2)
        sleeper.kill()
        assert sleeper.wait(timeout=60) == -9 and sleeper.returncode == -9
        hello = nodes.start(names[0], [sys.executable, "-c", "print('hello')"], env, str(tmp_path),
                            tmp_path / "hello.txt")
        assert hello.wait(timeout=60) == 0 and (tmp_path / "hello.txt").read_text() == "hello\n"
    finally:
        if connected:
            ray.shutdown()  # the module's cluster removes its nodes at the end: no driver may hold one


def test_a_step_whose_node_is_removed_is_retried_on_another(cluster, tmp_path):
    # Until Ray has noticed the node is gone it may place the retry there again: allow for that.
    step = Step(name="multinode/victim", fn=until_node_lost, config=VictimConfig(),
                resources=ResourceConfig(cpus=1, max_retries=3))
    runner = _runner(str(tmp_path / "store"), cluster.address)
    results: list = []

    def run() -> None:
        try:
            results.append(runner.run([step]))
        except Exception as error:  # noqa: BLE001 (shown below: in a thread it would only be a warning)
            results.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        first = None
        deadline = time.time() + 120
        while first is None:
            assert time.time() < deadline, "the step never started"
            found = list((tmp_path / "store" / "multinode").glob("victim-*/attempt-1"))
            first = found[0].read_text() if found and found[0].read_text() else None
            time.sleep(0.1)
        cluster.remove(first)
        thread.join(timeout=240)
        assert not thread.is_alive(), "the run did not finish after its node was removed"
    finally:
        runner.close()
    [result] = results
    assert not isinstance(result, BaseException), f"the run raised {result!r}"
    assert result.ok, result.failed
    outcome = result.by_name("multinode/victim")
    assert outcome.outcome is Outcome.RAN
    provenance = json.loads(fs.read_text(StepRecord(outcome.output_path).provenance))
    assert 2 <= provenance["attempts"] <= 4 and provenance["retries"] == provenance["attempts"] - 1
    # The attempt that finished is the newest that ran fn (one placed on the dead node never did).
    ran = sorted(int(n.split("-")[1]) for n in fs.listdir(outcome.output_path) if n.startswith("attempt-"))
    assert ran[0] == 1 and len(ran) >= 2
    last = fs.read_text(fs.join(outcome.output_path, f"attempt-{ran[-1]}"))
    assert last in NODES and last != first
