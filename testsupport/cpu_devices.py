"""The tests' XLA compile settings, and the environment of a child process that runs JAX on N CPU
devices (``os.environ`` only, so tests of every layer, iris's included, can use it).

The root ``conftest.py`` puts the session's compile settings (:data:`QUICK_COMPILE_FLAGS`) in
``XLA_FLAGS``; a child that replaced ``XLA_FLAGS`` with just its device count would compile with
XLA's defaults: slower, and not bit for bit the parent's programs. The device count is added to the
flags, never put in their place.
"""

from __future__ import annotations

import os

__all__ = ["LONG_RUN_COMPILE_FLAGS", "QUICK_COMPILE_FLAGS", "cpu_device_env", "cpu_device_settings",
           "for_long_runs", "with_quick_compile"]

QUICK_COMPILE_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")
"""How the tests' many tiny CPU programs compile: compiling, not running, is where their time goes.

* LLVM at -O0 nearly halves a compile (the levanter train step: 4.6 -> 2.6 CPU s);
* XLA's older elemental emitter instead of its MLIR fusion emitters takes a compile to a fifth
  (a llama_nano train step at -O0: 2.05 -> 0.41 CPU s, 2026-12-07, jax 0.10.2).

Together they run a program about 2.5x slower (that step: 117 -> 303 ms), which no test that runs a
few steps notices; builds that run hundreds take :data:`LONG_RUN_COMPILE_FLAGS`. The last bits
of a result may differ from XLA's defaults (llama_nano's params after 5 steps: same losses, other
bits), so a parent and the children it compares bit for bit must compile alike: children inherit
``XLA_FLAGS``."""


def _flag_name(flag: str) -> str:
    return flag.split("=", 1)[0]


def with_quick_compile(flags: str) -> str:
    """``flags`` (an ``XLA_FLAGS`` value) with each of :data:`QUICK_COMPILE_FLAGS` it does not set added."""
    present = {_flag_name(f) for f in flags.split()}
    return " ".join([*flags.split(), *(f for f in QUICK_COMPILE_FLAGS if _flag_name(f) not in present)])


LONG_RUN_COMPILE_FLAGS = ("--xla_backend_optimization_level=1", "--xla_cpu_use_fusion_emitters=false")
"""How the test builds that run hundreds of real steps compile (the nano store: ``python -m
experiments.train_nano`` and the smoke ``make experiments``): LLVM at -O1 with the older emitter
compiles a llama_nano train step in 1.4-1.6 CPU s against 3.2-3.4 at XLA's defaults and runs it as
fast (99-127 ms a step against 99-102, 2 cores). The nano build took 123 CPU-seconds against 139 at
the defaults and the smoke ``make experiments`` after it 137 against 189, with the same printed
losses and task scores (2026-12-07, jax 0.10.2)."""


def for_long_runs(flags: str) -> str:
    """``flags`` with the compile settings of :data:`QUICK_COMPILE_FLAGS` and
    :data:`LONG_RUN_COMPILE_FLAGS` replaced by the latter."""
    names = {_flag_name(f) for f in (*QUICK_COMPILE_FLAGS, *LONG_RUN_COMPILE_FLAGS)}
    return " ".join([*(f for f in flags.split() if _flag_name(f) not in names), *LONG_RUN_COMPILE_FLAGS])


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
