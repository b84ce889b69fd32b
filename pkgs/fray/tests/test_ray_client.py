"""What only the Ray backend does: retry a job whose worker was lost."""

from __future__ import annotations

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
