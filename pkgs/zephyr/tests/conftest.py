"""The Ray fixtures (a real head on 127.0.0.1)."""

from __future__ import annotations

from testsupport.ray_cluster import ray_client, ray_cluster  # noqa: F401 - fixtures
