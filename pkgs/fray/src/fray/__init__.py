"""fray: run functions elsewhere (local processes, Ray): futures, job handles with logs, actors."""

from fray.cluster import (
    ActorHandle,
    DistributedClient,
    Future,
    JobCancelled,
    JobFailed,
    JobHandle,
    LocalClient,
    LocalJobHandle,
    RayClient,
    RayJobHandle,
    RemoteError,
    current_client,
    ray_options_of,
)

__all__ = [
    "ActorHandle",
    "DistributedClient",
    "Future",
    "JobCancelled",
    "JobFailed",
    "JobHandle",
    "LocalClient",
    "LocalJobHandle",
    "RayClient",
    "RayJobHandle",
    "RemoteError",
    "current_client",
    "ray_options_of",
]
