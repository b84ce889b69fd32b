"""Two CPU processes form one JAX distributed job; data parallelism matches one process."""

from __future__ import annotations

import numpy as np
import pytest

from fray.cluster import JobFailed, LocalClient
from iris.cluster import ResourceConfig
from iris.multihost import (
    COORDINATOR_ENV,
    PROCESS_ID_ENV,
    MultihostEnv,
    PlacementStrategy,
    launch,
    launch_local,
    launch_ray,
)
from testsupport.cpu_devices import cpu_device_settings
from testsupport.fray_jobs import echo_env, raise_value_error
from testsupport.iris_jobs import (
    all_gather_then_linger,
    data_parallel_loss_and_grad,
    linear_loss_and_grad,
    linear_problem,
)

# float32 sums over 16 rows, reduced in a different order across processes.
RTOL, ATOL = 1e-5, 1e-6


def test_env_round_trip_and_validation():
    spec = MultihostEnv("127.0.0.1:1234", 4, 3)
    assert MultihostEnv.from_env(spec.to_env()) == spec
    assert MultihostEnv.from_env({}) is None
    with pytest.raises(ValueError, match="process_id must be in \\[0, 2\\), got 2"):
        MultihostEnv("127.0.0.1:1", 2, 2)


def test_two_processes_form_one_jax_job_and_match_one_process():
    batch, features, seed = 16, 8, 0
    with LocalClient() as client:
        job = launch(client, data_parallel_loss_and_grad, batch, features, seed,
                     resources=ResourceConfig.with_cpu(1, hosts=2), env=cpu_device_settings(1), name="dp")
        results = job.result(timeout=180)
    assert [r["process_id"] for r in results] == [0, 1]
    assert all(r["process_count"] == 2 and r["device_count"] == 2 for r in results)

    import jax.numpy as jnp

    x, y, w = linear_problem(batch, features, seed)
    loss, grad = linear_loss_and_grad(jnp.asarray(x), jnp.asarray(y), jnp.asarray(w))
    for r in results:
        np.testing.assert_allclose(r["loss"], float(loss), rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(r["grad"], np.asarray(grad), rtol=RTOL, atol=ATOL)
    # and it is not trivially equal to a one-shard computation
    half_loss, _ = linear_loss_and_grad(jnp.asarray(x[:8]), jnp.asarray(y[:8]), jnp.asarray(w))
    assert abs(float(half_loss) - float(loss)) > 1e-3


def test_a_process_finishing_after_process_0_is_not_aborted_by_its_end():
    # Process 0 hosts JAX's coordination service; ended at once (os._exit) it would take the
    # service with it while process 1 still works, and process 1 would abort (exit code -6).
    with LocalClient() as client:
        job = launch_local(client, all_gather_then_linger, 2.0, num_processes=2, env=cpu_device_settings(1), name="linger")
        assert job.result(timeout=180) == [[0, 1], [0, 1]]


def test_one_failing_process_fails_the_job_and_names_it():
    with LocalClient() as client:
        job = launch_local(client, raise_value_error, "shard broke", num_processes=2)
        with pytest.raises(JobFailed, match="process [01] failed: .*shard broke"):
            job.result(timeout=60)


def test_processes_see_their_place_on_ray(ray_client):
    job = launch_ray(ray_client, echo_env, PROCESS_ID_ENV, resources=ResourceConfig.with_cpu(0.5, hosts=2),
                     name="probe", strategy=PlacementStrategy.PACK, ready_timeout_s=60)
    assert job.result(timeout=120) == ["0", "1"]
    coordinators = launch_ray(ray_client, echo_env, COORDINATOR_ENV, resources=ResourceConfig.with_cpu(0.5, hosts=2),
                              name="probe2", strategy=PlacementStrategy.PACK, ready_timeout_s=60).result(timeout=120)
    import ray

    node_addresses = {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
    host, port = coordinators[0].rsplit(":", 1)
    assert coordinators[0] == coordinators[1] and host in node_addresses and int(port) > 0
    assert job.handles[0].done()
