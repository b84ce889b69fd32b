"""fray: run functions elsewhere (local processes, Ray): futures, job handles with logs, actors."""

from fray.cluster import (
    PREEMPTED_EXIT_CODE,
    ActorHandle,
    DistributedClient,
    Future,
    InProcessClient,
    JobCancelled,
    JobFailed,
    JobHandle,
    LocalClient,
    LocalJobHandle,
    Preempted,
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
    "InProcessClient",
    "JobCancelled",
    "JobFailed",
    "JobHandle",
    "PREEMPTED_EXIT_CODE",
    "Preempted",
    "LocalClient",
    "LocalJobHandle",
    "RayClient",
    "RayJobHandle",
    "RemoteError",
    "current_client",
    "ray_options_of",
]
