"""The environment of a child process that runs JAX on N CPU devices (``os.environ`` only, so tests of
every layer, iris's included, can use it).

The root ``conftest.py`` puts the session's compile settings (``--xla_backend_optimization_level=0``)
in ``XLA_FLAGS``; a child that replaced ``XLA_FLAGS`` with just its device count would compile at
XLA's default level: slower, and not bit for bit the parent's programs. The device count is added to
the flags, never put in their place.
"""

from __future__ import annotations

import os

__all__ = ["cpu_device_env", "cpu_device_settings"]


def cpu_device_settings(devices: int) -> dict[str, str]:
    """``JAX_PLATFORMS`` and ``XLA_FLAGS`` for a process that sees ``devices`` CPU devices: this
    process's ``XLA_FLAGS`` with the device count added."""
    if devices < 1:
        raise ValueError(f"devices must be >= 1, got {devices!r}")
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}".strip()
    return {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags}


def cpu_device_env(devices: int) -> dict[str, str]:
    """The whole ``os.environ`` for a child process, with :func:`cpu_device_settings` in it."""
    return {**os.environ, **cpu_device_settings(devices)}
