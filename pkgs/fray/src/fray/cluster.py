"""Run functions elsewhere: the ``DistributedClient`` interface, its backends and the one to use."""

from __future__ import annotations

from typing import Protocol

from fray.inprocess import InProcessClient
from fray.local import LocalClient, LocalJobHandle
from fray.ray_client import RayClient, RayJobHandle
from fray.types import (
    ANY_REGION,
    PREEMPTED_EXIT_CODE,
    ActorHandle,
    DistributedClient,
    Future,
    JobCancelled,
    JobFailed,
    JobHandle,
    Preempted,
    RayOptionsLike,
    RemoteError,
    ResourceConfig,
    ResourcesLike,
    ray_options_of,
)
from rigging.config.discovery import Backend, discover_config

__all__ = [
    "ANY_REGION",
    "ActorHandle",
    "ClientChoice",
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
    "RayOptionsLike",
    "RemoteError",
    "ResourceConfig",
    "ResourcesLike",
    "current_client",
    "ray_options_of",
]


class ClientChoice(Protocol):
    """What chooses the client: a ``MarinConfig``, or anything else with these two settings (a
    runner's settings)."""

    @property
    def backend(self) -> Backend: ...

    @property
    def ray_address(self) -> str | None: ...


def current_client(config: ClientChoice | None = None) -> DistributedClient:
    """The client the configuration asks for: local processes, or the Ray cluster at ``ray_address``.

    Args:
        config: the resolved configuration (or a runner's settings); default:
            :func:`rigging.config.discovery.discover_config`.
    """
    config = config if config is not None else discover_config()
    match config.backend:
        case Backend.LOCAL:
            return LocalClient()
        case Backend.RAY:
            return RayClient(address=config.ray_address)
    raise ValueError(f"unknown backend {config.backend!r}")
