"""Step functions for the synthetic graphs of the engine benchmarks (importable by workers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from marin.execution.core.placeholders import output_path_of
from marin.execution.core.step import Step
from rigging import filesystem as fs


@dataclass(frozen=True)
class LinkConfig:
    """One link of the chain: its index and the previous link's output."""

    index: int
    previous: Any = None


def link(config: LinkConfig, output_path: str) -> None:
    """Write the link's index: a trivial step, so what is measured is the engine's cost."""
    fs.atomic_write(fs.join(output_path, "index.txt"), str(config.index))


def link_importing(config: LinkConfig, output_path: str) -> None:
    """:func:`link`, whose function imports a library inside, as step functions do so that planning
    stays light: what a warm worker that keeps its imports saves."""
    import fsspec  # inside on purpose: this import is what the step measures

    if config.previous is not None and not fsspec.filesystem("file").exists(config.previous):
        raise FileNotFoundError(config.previous)
    link(config, output_path)


def link_importing_numpy(config: LinkConfig, output_path: str) -> None:
    """:func:`link`, whose function imports numpy inside and uses it: numpy's BLAS starts threads when
    it loads, which a warm worker may hold only with its BLAS on one thread (``fray.template_blas``)."""
    import numpy  # inside on purpose: this import is what the step measures

    link(LinkConfig(index=int(numpy.asarray(config.index).sum()), previous=config.previous), output_path)


def chain(n: int, fn: Any = link, group: str = "chain") -> list[Step]:
    """A chain of ``n`` steps of ``fn``, each reading the previous one's output; returns [last]."""
    previous = None
    for i in range(n):
        step = Step(name=f"{group}/link{i:05d}", fn=fn,
                    config=LinkConfig(index=i, previous=output_path_of(previous) if previous else None))
        previous = step
    return [previous]


def chain_importing(n: int) -> list[Step]:
    """A chain of ``n`` steps of :func:`link_importing`; returns [last]."""
    return chain(n, fn=link_importing, group="chain-importing")


def chain_importing_numpy(n: int) -> list[Step]:
    """A chain of ``n`` steps of :func:`link_importing_numpy`; returns [last]."""
    return chain(n, fn=link_importing_numpy, group="chain-importing-numpy")


def fan(n: int) -> list[Step]:
    """``n`` independent trivial steps (a sweep): all of them are targets."""
    return [Step(name=f"fan/leaf{i:05d}", fn=link, config=LinkConfig(index=i)) for i in range(n)]


def sweeps(n: int, per_group: int = 100) -> list[Step]:
    """``n`` steps in groups of ``per_group`` (``sweep0003/link00042``), a chain inside each group."""
    targets = []
    for g in range(0, n, per_group):
        previous = None
        for i in range(g, min(n, g + per_group)):
            previous = Step(name=f"sweep{g // per_group:04d}/link{i:05d}", fn=link,
                            config=LinkConfig(index=i, previous=output_path_of(previous) if previous else None))
        targets.append(previous)
    return targets


@dataclass(frozen=True)
class TickConfig:
    """Config of :func:`tick_until_stopped`: where it says its pid, how long it would run."""

    pid_file: str
    seconds: float = 120.0


def tick_until_stopped(config: TickConfig, output_path: str) -> None:
    """Write a tick into the output every 20 ms until ``seconds`` pass (a step that must be stopped);
    run again (its pid file there), it finishes at once."""
    import os
    import time

    if os.path.exists(config.pid_file):
        fs.atomic_write(fs.join(output_path, "tick.txt"), "done")
        return
    fs.atomic_write(config.pid_file, str(os.getpid()))
    deadline = time.monotonic() + config.seconds
    while time.monotonic() < deadline:
        fs.atomic_write(fs.join(output_path, "tick.txt"), repr(time.time()), durable=False)
        time.sleep(0.02)
