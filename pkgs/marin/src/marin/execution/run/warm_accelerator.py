"""Accelerator steps run one after another in a warm process that keeps the accelerator open.

Opening a TPU takes seconds (libtpu's start), and so do the imports and the compilations of a step
that uses it; a fresh interpreter per accelerator step pays them every time. With
``accelerator_process: warm`` (the default) the local runner keeps one long-lived process per
accelerator slot (:class:`fray.warm_process.WarmProcess`), started by the slot's first step of the
run and ended when the run ends (or after ``WARM_IDLE_S`` without a step), so the accelerator is free
between runs. Each step runs in it as if alone (:mod:`fray.call_hygiene`: its log, its variables,
no buffer or JAX flag left behind); a step that failed or left what cannot be put back retires the
process, with one warning naming the step and what it left, and the next step starts a new one.
``fresh`` runs each accelerator step in an interpreter of its own, as CPU steps' warm pool never does.

On a host without an accelerator, the steps whose function computes on one (``StepTraits.accelerator``:
training, evaluation, generation) compute on the CPU with JAX, which the warm pool's template never
imports (a process whose JAX runtime started cannot be forked safely): each would import JAX, Haiku,
Optax, Grain and Orbax again, seconds of CPU for steps that often compute for less. They run in warm
processes too (:meth:`AcceleratorProcesses.submit_on_cpu`), as accelerator steps do, with as many
processes as such steps run at once: a step takes one that runs nothing, else a new one.

Whichever process runs them, accelerator steps keep their compiled programs in JAX's persistent
compilation cache (:func:`compilation_cache_env`): a rerun, a resumed run and the evaluations of one
model reuse each other's programs. A cached program is the one XLA would compile again: it changes
no result and is never part of a hash.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from rigging.config.discovery import user_cache_folder

if TYPE_CHECKING:
    from fray.warm_process import WarmProcess
    from marin.execution.run.settings import RunSettings

__all__ = ["WARM_IDLE_S", "AcceleratorProcesses", "compilation_cache_env", "process_line"]

logger = logging.getLogger("marin.execution.step_runner")

WARM_IDLE_S = 600.0
"""A warm accelerator process left this long without a step exits (and frees the accelerator)."""

COMPILATION_CACHE_VARIABLE = "JAX_COMPILATION_CACHE_DIR"


def compilation_cache_env(settings: RunSettings, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables that give an accelerator step JAX's persistent compilation cache: the folder
    ``compilation_cache`` names (``off``: none); unset, the one ``JAX_COMPILATION_CACHE_DIR`` already
    names in the environment, else ``$XDG_CACHE_HOME/marin/jax`` (``~/.cache/marin/jax``)."""
    env = os.environ if environ is None else environ
    chosen = settings.compilation_cache
    if chosen is not None and chosen.lower() == "off":
        return {}
    if chosen is None and env.get(COMPILATION_CACHE_VARIABLE):
        return {}
    return {COMPILATION_CACHE_VARIABLE: chosen or os.path.join(user_cache_folder(env), "jax")}


def process_line(settings: RunSettings) -> str:
    """How this run's local accelerator steps run, in one line (``marin plan`` and the run's header)."""
    where = settings.sources.get("accelerator_process", "default")
    if settings.accelerator_process == "warm":
        how = "one after another in a warm process per accelerator slot that keeps it open"
    else:
        how = "each in a fresh process that opens it again"
    cache = compilation_cache_env(settings).get(COMPILATION_CACHE_VARIABLE) or os.environ.get(COMPILATION_CACHE_VARIABLE)
    kept = f"compiled programs kept in {cache}" if cache else "no compilation cache"
    return f"accelerator steps run {how} (accelerator_process: {settings.accelerator_process}, {where}); {kept}"


def _new_process(env: Mapping[str, str]) -> WarmProcess:
    """A warm process for steps that compute with JAX (started by its first step, with ``env``)."""
    # fray's warm process: only for a run with a step that computes with JAX.
    from fray.warm_process import WarmConfig, WarmProcess

    # JAX imported as the process starts: the flags a step changes are put back to the values it found.
    return WarmProcess(WarmConfig(idle_s=WARM_IDLE_S, preload=("jax",)), env=env,
                       on_retire=lambda line: logger.warning("%s", line))


class AcceleratorProcesses:
    """This run's warm accelerator processes, one per set of accelerator slots its steps held."""

    def __init__(self) -> None:
        self._by_slots: dict[tuple[int, ...], WarmProcess] = {}
        self._on_cpu: list[WarmProcess] = []
        self._closed_started_on_cpu = 0
        self._lock = threading.Lock()

    def for_slots(self, slots: tuple[int, ...], env: Mapping[str, str]) -> WarmProcess:
        """The warm process of ``slots`` (started by its first step, with ``env``: the variables
        that give it those slots). Processes of other slots that share one are ended first (they are
        idle: admission gave these slots to this step), so that no two processes hold a chip."""
        warm = self._by_slots.get(slots)
        if warm is None:
            for other in [s for s in self._by_slots if set(s) & set(slots)]:
                self._by_slots.pop(other).shutdown()
            warm = self._by_slots[slots] = _new_process(env)
        return warm

    def submit_on_cpu(self, fn: Callable[..., Any], *args: Any, name: str, env: Mapping[str, str]) -> Any:
        """Run a step that computes with JAX on a host without an accelerator, in a warm process that
        runs nothing now (a new one when every one is busy); its job's handle."""
        with self._lock:  # two steps starting at once never pick the same process
            warm = next((w for w in self._on_cpu if w.free), None)
            if warm is None:
                warm = _new_process(env)
                self._on_cpu.append(warm)
            return warm.submit(fn, *args, name=name, env=env)

    @property
    def started_on_cpu(self) -> int:
        """How many warm processes the steps that compute with JAX on the CPU have started (ended ones too)."""
        return self._closed_started_on_cpu + sum(warm.processes_started for warm in self._on_cpu)

    @property
    def pids(self) -> set[int]:
        """The live warm processes (each may hold the accelerator's lock while it waits for a step)."""
        return {pid for warm in self._by_slots.values() if (pid := warm.pid) is not None}

    def close(self) -> None:
        """End every warm process (the run ended): the accelerator is free again."""
        for warm in [*self._by_slots.values(), *self._on_cpu]:
            warm.shutdown()
        self._by_slots.clear()
        self._closed_started_on_cpu = self.started_on_cpu
        self._on_cpu.clear()
