"""fray: run functions elsewhere (local processes, Ray): futures, job handles with logs, actors; and
the resource request type, ``ResourceConfig``."""

from fray.cluster import (
    ANY_REGION,
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
    ResourceConfig,
    current_client,
    ray_options_of,
)

__all__ = [
    "ANY_REGION",
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
    "ResourceConfig",
    "current_client",
    "ray_options_of",
]
