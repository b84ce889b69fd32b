"""fray: run functions elsewhere (local processes, Ray)."""

from fray.cluster import DistributedClient, JobCancelled, JobFailed, JobHandle, LocalClient

__all__ = ["DistributedClient", "JobCancelled", "JobFailed", "JobHandle", "LocalClient"]
