"""Step functions for a simulated exclusive accelerator (imported by workers as ``accelerator_steps``).

The accelerator is a lock file taken the way libtpu takes ``/tmp/libtpu_lockfile``: a POSIX
(``fcntl``) write lock over the whole file. :func:`tpu_step`'s process takes it when it opens the
accelerator (:func:`open_chip`, its ``open_accelerator`` trait: before the function runs, as JAX's
backend start) and holds it until the step ends; a process that finds it held fails at once with
libtpu's own words. Every step records, in ``<record_dir>/<label>.json``,
when it ran, its process and what it saw of the variables that hide the accelerator.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from marin.execution.core.step import Step, unhashed_field
from marin.execution.core.traits import ON_ACCELERATOR, StepTraits, step_function
from rigging import filesystem as fs
from testsupport.accelerator import LIBTPU_HELD, hold_lock

__all__ = ["LIBTPU_HELD", "ChipConfig", "JaxChipConfig", "cpu", "cpu_step", "failing_tpu", "failing_tpu_step", "hold_lock",
           "jax_chip", "jax_step", "open_chip", "read_records", "tpu", "tpu_step"]

@dataclass(frozen=True)
class ChipConfig:
    """Config of :func:`tpu_step` and :func:`cpu_step`."""

    label: str
    seconds: float = 0.3
    lock: str = unhashed_field(default="")
    """The simulated runtime's lock file (:func:`tpu_step` takes it)."""
    record_dir: str = unhashed_field(default="")
    meets: str = unhashed_field(default="")
    """The label of a step that must be running at the same time: the step waits (up to a minute)
    for it to have started, so that two steps run one after the other fail instead of passing."""


def _meet(config: ChipConfig) -> None:
    """Say this step started, then wait for :attr:`ChipConfig.meets` to have started too."""
    with open(os.path.join(config.record_dir, f"{config.label}.started"), "w"):
        pass
    other = os.path.join(config.record_dir, f"{config.meets}.started")
    deadline = time.monotonic() + 60
    while not os.path.exists(other):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{config.meets} did not start while {config.label} ran")
        time.sleep(0.02)


def _record(config: ChipConfig, kind: str, start: float) -> None:
    seen = {name: os.environ.get(name) for name in ("JAX_PLATFORMS", "CUDA_VISIBLE_DEVICES", "TPU_VISIBLE_CHIPS")}
    record = {"label": config.label, "kind": kind, "start": start, "end": time.time(), "pid": os.getpid(),
              "ppid": os.getppid(), **seen}
    path = os.path.join(config.record_dir, f"{config.label}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)


_OPENED: dict[str, int] = {}
"""The simulated accelerators this process opened (lock file: its descriptor), as libtpu keeps its own."""


def open_chip(config: ChipConfig | JaxChipConfig) -> None:
    """Open the simulated accelerator as libtpu opens the TPU: take its lock, or fail in libtpu's words."""
    if config.lock in _OPENED:
        return
    fd = os.open(config.lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise RuntimeError(LIBTPU_HELD) from None
    _OPENED[config.lock] = fd


@contextlib.contextmanager
def _chip_open(config: ChipConfig | JaxChipConfig) -> Iterator[None]:
    """The simulated accelerator open (:func:`open_chip`) while the step computes; let go after it."""
    open_chip(config)  # open already, unless the function is called outside a step's process
    try:
        yield
    finally:
        os.close(_OPENED.pop(config.lock))  # the lock goes with it


_ON_CHIP = StepTraits(accelerator=True, open_accelerator=open_chip)


@step_function(_ON_CHIP)
def tpu_step(config: ChipConfig, output_path: str) -> None:
    """Compute a while on the simulated accelerator (its process opened it first), then let it go."""
    with _chip_open(config):
        start = time.time()
        if config.meets:
            _meet(config)
        time.sleep(config.seconds)
        _record(config, "accelerator", start)
    fs.atomic_write(fs.join(output_path, "out.txt"), config.label.encode())


@step_function(_ON_CHIP)
def failing_tpu_step(config: ChipConfig, output_path: str) -> None:
    """Open the simulated accelerator, then fail for the step's own reason in words that read like a
    held accelerator (CUDA says "busy or unavailable" for a faulted GPU too)."""
    raise RuntimeError(f"the step's own error: {LIBTPU_HELD}; all CUDA-capable devices are busy or unavailable")


def cpu_step(config: ChipConfig, output_path: str) -> None:
    """A data step: a while on the CPU."""
    start = time.time()
    time.sleep(config.seconds)
    _record(config, "cpu", start)
    fs.atomic_write(fs.join(output_path, "out.txt"), config.label.encode())


def tpu(label: str, record_dir: str, lock: str, seconds: float = 0.3, meets: str = "") -> Step:
    return Step(f"chip/{label}", tpu_step, ChipConfig(label, seconds, lock=lock, record_dir=record_dir, meets=meets))


def failing_tpu(label: str, record_dir: str, lock: str) -> Step:
    return Step(f"chip/{label}", failing_tpu_step, ChipConfig(label, 0.0, lock=lock, record_dir=record_dir))


def cpu(label: str, record_dir: str, seconds: float = 0.3) -> Step:
    return Step(f"data/{label}", cpu_step, ChipConfig(label, seconds, record_dir=record_dir))


def read_records(record_dir: str) -> dict[str, dict]:
    """Every step's record, by label."""
    out = {}
    for name in sorted(os.listdir(record_dir)):
        if name.endswith(".json"):
            with open(os.path.join(record_dir, name)) as f:
                out[name[:-5]] = json.load(f)
    return out


@dataclass(frozen=True)
class JaxChipConfig:
    """Config of :func:`jax_step`: a tiny JAX computation on the simulated accelerator."""

    label: str
    seed: int = 0
    after: Any = None
    """Another step's output (a placeholder): this step runs after it."""
    leave_array: bool = False
    """Keep an array alive in a module after the step (a leak a warm process must not carry on)."""
    enable_x64: bool = False
    """Turn JAX's ``jax_enable_x64`` flag on inside the step (a global a warm process must put back)."""
    hold_s: float = 0.0
    """Sleep this long after the start record (once: a marker in ``record_dir`` says it slept)."""
    lock: str = unhashed_field(default="")
    record_dir: str = unhashed_field(default="")


_KEPT: list[Any] = []  # where a leaking step keeps its array


@step_function(ON_ACCELERATOR)
def jax_step(config: JaxChipConfig, output_path: str) -> None:
    """Hold the simulated accelerator's lock while computing a little with JAX; print a line and
    log one (each names the step); write the result's bytes and the default float dtype; record
    the run (``<record_dir>/<label>.json``, and a line per run in ``<label>.runs``)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    with _chip_open(config):
        start = time.time()
        with open(os.path.join(config.record_dir, f"{config.label}.runs"), "a") as f:
            f.write(f"{os.getpid()}\n")
        marker = os.path.join(config.record_dir, f"{config.label}.held")
        if config.hold_s and not os.path.exists(marker):
            open(marker, "w").close()
            time.sleep(config.hold_s)
        if config.enable_x64:
            jax.config.update("jax_enable_x64", True)
        print(f"stdout line of {config.label}", flush=True)
        logging.getLogger("accelerator_steps").warning("log line of %s", config.label)
        x = jnp.arange(64, dtype=jnp.float32).reshape(8, 8) * (config.seed + 1)
        y = jax.jit(lambda a: jnp.tanh(a @ a.T / 64.0).sum(axis=0))(x)
        if config.leave_array:
            _KEPT.append(y)
        default = str(jnp.ones(1).dtype)
        out = np.asarray(y).tobytes() + default.encode()
        _record(config, "accelerator", start)  # type: ignore[arg-type] - the same fields it reads
        _record_extra(config, {"default_dtype": default, "cache_dir": os.environ.get("JAX_COMPILATION_CACHE_DIR")})
    fs.atomic_write(fs.join(output_path, "out.bin"), out)


def _record_extra(config: JaxChipConfig, extra: dict[str, Any]) -> None:
    path = os.path.join(config.record_dir, f"{config.label}.json")
    with open(path) as f:
        record = json.load(f)
    record.update(extra)
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)


def jax_chip(label: str, record_dir: str, lock: str, **fields: Any) -> Step:
    return Step(f"chip/{label}", jax_step, JaxChipConfig(label, lock=lock, record_dir=record_dir, **fields))
