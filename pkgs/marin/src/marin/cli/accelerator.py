"""The host's accelerator as the CLI sees it: hidden from the CLI's own process, and described."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from iris.accelerator import HostAccelerator

__all__ = ["describe_host_accelerator", "hide_from_cli"]

NOTHING_FOUND = "no /dev/accel*, no /dev/vfio group on a TPU host, no /dev/nvidia*, no CUDA_VISIBLE_DEVICES"
"""Where the accelerator was looked for, when nothing was found."""


def hide_from_cli(config: Any) -> HostAccelerator | None:
    """Find the host's accelerator (as ``config`` states it, or on the host) and hide it from this
    process and what it starts (``JAX_PLATFORMS=cpu`` ...: ``iris.accelerator_env``): the CLI
    never computes on it; a run gives it back to the steps admitted to it.

    Raises:
        rigging.config.discovery.ConfigError: ``accelerator`` or ``accelerator_slots`` cannot be,
            naming where it was set.
    """
    from iris.accelerator_env import hiding_env
    from marin.execution.run.accelerator import host_accelerator

    found = host_accelerator(config)
    if found is not None:
        os.environ.update(hiding_env(os.environ, found))
    return found


def describe_host_accelerator(found: HostAccelerator | None, config: Any) -> tuple[str, str]:
    """(what, where from) of the host's accelerator, for ``marin config`` and ``marin status``."""
    if found is not None:
        return found.describe(), found.source
    if config.accelerator is not None:
        return "none", f"stated in {config.sources.get('accelerator', 'override')}"
    return "none", f"found nothing ({NOTHING_FOUND})"
