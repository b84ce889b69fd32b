"""A step whose resources span two hosts runs as two local processes that form one JAX job; the
runner treats them as one step (done when both succeed, failed as soon as one fails)."""

from __future__ import annotations

import json
import os
import time

import numpy as np

from iris.cluster import ResourceConfig
from iris.multihost import MultihostEnv
from marin.execution.core.step import Step
from marin.execution.run.outcome import Outcome
from marin.execution.run.runner import StepRunner
from marin.execution.store.records import StepRecord
from rigging import filesystem as fs
from rigging.config.discovery import Backend
from testsupport.cpu_devices import cpu_device_settings
from testsupport.iris_jobs import data_parallel_loss_and_grad, linear_loss_and_grad, linear_problem

# float32 sums over 16 rows, reduced in a different order across processes.
RTOL, ATOL = 1e-5, 1e-6
BATCH, FEATURES, SEED = 16, 8, 0


def data_parallel_step(config: dict, output_path: str) -> None:
    """One process of the step: join the JAX job, compute the global loss, record what it saw."""
    result = data_parallel_loss_and_grad(config["batch"], config["features"], config["seed"])
    print(f"process {result['process_id']} of {result['process_count']} in pid {os.getpid()}", flush=True)
    fs.atomic_write(fs.join(output_path, f"process-{result['process_id']}.json"), json.dumps(result))


def process_one_fails(config: dict, output_path: str) -> None:
    """Process 1 raises; process 0 would wait (as in a collective) until it is cancelled."""
    spec = MultihostEnv.from_env()
    if spec.process_id == 1:
        raise RuntimeError("host 1 broke")
    time.sleep(60)


def _runner(prefix: str) -> StepRunner:
    return StepRunner(prefix=prefix, max_parallel=2, strict_env=False, backend=Backend.LOCAL, poll_interval=0.05)


def test_a_two_host_step_runs_two_processes_as_one_jax_job(tmp_path, monkeypatch):
    for name, value in cpu_device_settings(1).items():  # the step's processes inherit the environment
        monkeypatch.setenv(name, value)
    step = Step(name="multihost/data-parallel", fn=data_parallel_step,
                config={"batch": BATCH, "features": FEATURES, "seed": SEED},
                resources=ResourceConfig.with_cpu(1, hosts=2))
    result = _runner(str(tmp_path / "store")).run([step])
    assert result.ok, result.failed
    [outcome] = result.steps
    assert outcome.outcome is Outcome.RAN
    seen = [json.loads(fs.read_text(fs.join(outcome.output_path, f"process-{i}.json"))) for i in range(2)]
    assert all(r["process_count"] == 2 and r["device_count"] == 2 for r in seen)

    import jax.numpy as jnp

    x, y, w = linear_problem(BATCH, FEATURES, SEED)
    loss, grad = linear_loss_and_grad(jnp.asarray(x), jnp.asarray(y), jnp.asarray(w))
    for r in seen:
        np.testing.assert_allclose(r["loss"], float(loss), rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(r["grad"], np.asarray(grad), rtol=RTOL, atol=ATOL)

    record = StepRecord(outcome.output_path)
    provenance = json.loads(fs.read_text(record.provenance))
    pids = {w["pid"] for w in provenance["worker"]}
    assert len(pids) == 2 and os.getpid() not in pids
    log = fs.read_text(record.log)
    assert "process 0 of 2 in pid" in log and "process 1 of 2 in pid" in log  # both wrote the step's log


def test_when_one_process_fails_the_step_fails_at_once_naming_it(tmp_path):
    step = Step(name="multihost/broken", fn=process_one_fails, config={},
                resources=ResourceConfig.with_cpu(1, hosts=2))
    started = time.monotonic()
    result = _runner(str(tmp_path / "store")).run([step])
    [outcome] = result.steps
    assert outcome.outcome is Outcome.FAILED
    assert "process 1 failed" in outcome.error and "host 1 broke" in outcome.error
    assert time.monotonic() - started < 30  # process 0 was cancelled, not waited for
