"""What only the Ray backend does: retry a job whose worker was lost; keep a job whose log sink was lost."""

from __future__ import annotations

import time

import pytest

from fray.cluster import JobFailed
from testsupport import fray_jobs


def test_a_job_whose_worker_dies_is_retried(ray_client, tmp_path):
    marker = str(tmp_path / "attempted")
    handle = ray_client.submit(fray_jobs.kill_parent_once, marker, resources={"max_retries": 2})
    assert handle.result(timeout=120) == "survived"


def test_without_retries_a_lost_worker_fails_the_job(ray_client, tmp_path):
    marker = str(tmp_path / "attempted")
    handle = ray_client.submit(fray_jobs.kill_parent_once, marker)
    with pytest.raises(JobFailed):
        handle.result(timeout=120)


def test_a_lost_log_sink_loses_the_output_not_the_job(ray_client):
    # The driver reads every job's output from one actor; a worker node lost with that actor on it
    # once made the run itself raise ActorUnavailableError. Output is best effort; the result is not.
    import ray

    from fray.ray_client import RayClient

    client = RayClient()  # this process's connection (made by the fixture), with a log sink of its own
    try:
        handle = client.submit(fray_jobs.print_lines, 30, 0.06)  # 1.8 s: it prints on after the sink is gone
        deadline = time.monotonic() + 60
        while "line" not in handle.logs():
            assert time.monotonic() < deadline, "no output arrived"
            time.sleep(0.1)
        ray.kill(handle._sink, no_restart=True)  # the sink's node is gone
        time.sleep(0.5)
        assert handle.logs() == ""
        assert handle.result(timeout=120) == 30
    finally:
        client.shutdown()


def test_a_jobs_process_is_started_without_the_ray_workers_main_script(ray_client):
    # spawn runs the parent's main script again in the child: a Ray worker's is Ray's own, which
    # imports all of Ray (about a second a job) for nothing a job needs.
    was_loaded, _parent = ray_client.submit(fray_jobs.loaded, "ray").result(timeout=120)
    assert not was_loaded, "the job's process imported Ray before its call"
