from fray.testing import ray_client, ray_cluster  # noqa: F401 - fixtures
