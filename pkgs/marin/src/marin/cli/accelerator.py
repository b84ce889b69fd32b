"""The host's accelerator as the CLI sees it: hidden from the CLI's own process, and described."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from iris.accelerator import HostAccelerator

__all__ = ["describe_host_accelerator", "hide_from_cli", "take_accelerator"]

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


def take_accelerator(ctx: Any, *, wait: bool) -> str:
    """Give this verb's process the host's accelerator (``load_config`` hid it) once no other process
    holds it, for verbs that compute on it themselves (``marin sample``, ``marin serve``); returns what
    it computes on, in words.

    Args:
        wait: wait for the holder to let go (saying once who it is), as a step waits its turn;
            otherwise a held accelerator is a user error naming the holder.
    """
    import time

    import click

    from iris.accelerator_env import reveal_accelerator
    from iris.chip_lock import lock_holder
    from marin.cli.errors import MarinError

    found, config = (ctx.obj or {}).get("accelerator"), (ctx.obj or {}).get("config")
    if found is None:
        return "cpu"
    lock = config.accelerator_lock if config is not None and config.accelerator_lock else found.default_lock
    said = False
    while (holder := lock_holder(lock) if lock is not None else None) is not None:
        if not wait:
            raise MarinError(f"the accelerator ({found.describe()}) is busy: {holder.describe()}",
                             hint="wait for that process to end (a `marin run` step?), or run on the CPU with "
                                  "JAX_PLATFORMS=cpu MARIN_ACCELERATOR=none")
        if not said:
            click.echo(f"waiting for the accelerator ({found.describe()}): {holder.describe()}", err=True)
            said = True
        time.sleep(1.0)
    reveal_accelerator()
    return found.describe()
