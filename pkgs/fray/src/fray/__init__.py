"""fray: run functions elsewhere (local processes, Ray): futures, job handles with logs, actors; and
the resource request type, ``ResourceConfig``.

Each name loads its module on first use (:mod:`rigging.lazy`): a caller that needs only the
request types (:mod:`fray.resources`) never pays for the clients.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rigging.lazy import lazy_getattr

if TYPE_CHECKING:
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

__getattr__ = lazy_getattr(__name__, dict.fromkeys(__all__, "fray.cluster"))
