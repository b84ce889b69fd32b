from testsupport.ray_cluster import ray_client, ray_cluster  # noqa: F401 - fixtures
