"""A warm process: one long-lived local process that runs calls one after another, itself.

What must happen in a process that has opened a device (a TPU is opened once per process, and
opening it takes seconds) cannot be forked from a warm template (:mod:`fray.pool`): the calls run
in the process itself, each as if alone (:mod:`fray.warm_main`):

* its own environment variables, its output (file descriptors 1 and 2) in its own log, its
  outcome as a pool call's (:class:`fray.pool_job.PoolJobHandle`, ``pid`` the warm process);
* after it, the process puts back what the call changed and checks that nothing is left on the
  device (:mod:`fray.call_hygiene`); a call that failed or left what cannot be put back ends the
  process, and the next call starts a new one (``on_retire`` is told why, naming the call);
* the process dies with its caller (even by SIGKILL), and a call cancelled, or a process killed
  mid-call, is that call's death alone: the call ends ``died``, the next starts a new process;
* a process that does not come back clean within ``settle_s`` of a call's end is killed;
* it exits when left idle ``idle_s``, or when the caller retires it (:meth:`WarmProcess.retire`).

A :class:`WarmProcess` runs one call at a time: calls submitted while one runs wait their turn.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import subprocess
import threading
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import cloudpickle

from fray.pool_job import PoolJobHandle
from fray.pool_messages import Exited, Prepare, Retire, Run, Settled, Started, WarmSettings
from fray.pool_template import read_result
from fray.process_job import new_call_log
from fray.types import ActorHandle, DistributedClient, ResourcesLike, job_name, ray_options_of
from fray.worker_process import preparation_data, remove_folders, start_worker
from rigging.tempdirs import FRAY_POOL, FRAY_POOL_RESULTS, owned_tempdir

__all__ = ["WarmConfig", "WarmProcess"]

logger = logging.getLogger("fray.warm_process")


@dataclass(frozen=True)
class WarmConfig:
    """How a :class:`WarmProcess` keeps its process.

    Attributes:
        idle_s: the process exits after this many seconds without a call.
        settle_s: seconds a process may take, after a call ended, to put itself back before it is killed.
        preload: modules the process imports when it starts (``jax``: its import paid before a call
            waits for it; the JAX flags a call changes are put back either way).
    """

    idle_s: float = 600.0
    settle_s: float = 60.0
    preload: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("idle_s", "settle_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if isinstance(self.preload, str) or not all(isinstance(m, str) and m for m in self.preload):
            raise ValueError(f"preload must be a tuple of module names, got {self.preload!r}")


class _Served:
    """The caller's side of one warm process."""

    def __init__(self, owner: WarmProcess, number: int):
        self.owner = owner
        own_log = os.path.join(owner._log_dir, f"warm-{number:03d}.log")
        self.conn, self.process = start_worker("fray.warm_main:warm_main", [own_log], {**os.environ, **owner.env})
        self.conn.send(Prepare(preparation_data("fray-warm-process"),
                               WarmSettings(owner.config.idle_s, owner.config.preload)))
        self.running: PoolJobHandle | None = None
        self.settling: PoolJobHandle | None = None  # ended, the process not yet back clean
        self.retiring = False  # it takes no more calls and exits (ended: it has)
        self.ended = False
        self._reader = threading.Thread(target=self._read, daemon=True, name="fray-warm-reader")
        self._reader.start()

    @property
    def ready(self) -> bool:
        return not (self.ended or self.retiring) and self.running is None and self.settling is None

    def start(self, handle: PoolJobHandle) -> None:
        self.running = handle
        try:
            self.conn.send(Run(handle.call_id, [], handle._payload, handle._env, handle.log_path, handle.result_path))
        except (OSError, ValueError):
            pass  # the reader finds it gone and ends the call

    def _read(self) -> None:
        while True:
            timeout = self.owner.config.settle_s if self.settling is not None else None
            try:
                if not self.conn.poll(timeout):
                    what = self.settling.name if self.settling is not None else "?"
                    self.retiring = True
                    self.owner._retired(f"the warm process (pid {self.process.pid}) did not come back "
                                              f"after {what} within {self.owner.config.settle_s:g}s (settle_s)")
                    self.kill()
                    break
                message = self.conn.recv()
            except (EOFError, OSError):
                break
            self._on_message(message)
        self.process.wait()
        self.ended = True
        handle, self.running, self.settling = self.running, None, None
        if handle is not None:
            code = self.process.returncode
            handle._finish(("died", f"the warm process (pid {self.process.pid}) exited with code {code}", code))
        self.owner._next()

    def _on_message(self, message: Any) -> None:
        if isinstance(message, Started) and self.running is not None:
            self.running._started(message.pid)
        elif isinstance(message, Exited) and self.running is not None:
            # Settling before no longer running: never both unset while the process is not yet clean.
            handle = self.settling = self.running
            self.running = None
            handle._finish(read_result(handle.result_path, message.code)[0])
        elif isinstance(message, Settled):
            ended, self.settling = self.settling, None
            if message.unclean is not None:
                self.retiring = True  # it exits now
                self.owner._retired(f"the warm process (pid {self.process.pid}) retires after "
                                    f"{ended.name if ended else 'a call'}: {message.unclean}")
            else:
                self.owner._next()

    def retire(self, wait_s: float = 0.0) -> None:
        """Exit once the call running (if any) ended; wait up to ``wait_s`` for it, then kill it."""
        self.retiring = True
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(Retire())
        if wait_s > 0:
            try:
                self.process.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                self.kill()
            self._reader.join(timeout=5)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)


class _WarmJobHandle(PoolJobHandle):
    """A call of a warm process: one cancelled while it waits its turn never starts."""

    _owner: WarmProcess

    def _end(self, grace_s: float) -> None:
        with self._owner._lock:
            waiting = self in self._owner._queue
            if waiting:
                self._owner._queue.remove(self)
        if waiting:
            self._finish(("died", "cancelled before it started", None))
        else:
            super()._end(grace_s)


class WarmProcess(DistributedClient):
    """Runs calls one at a time in one long-lived process (see the module docstring).

    Args:
        config: its idle time, its cleanup time, what it imports at start.
        env: variables the process starts with (besides the caller's): what must be set before a
            call's libraries are imported (which devices it sees).
        on_retire: told a line whenever a process retires after a call that left it unclean
            (naming the call and what it left); by default the line is logged as a warning.
    """

    def __init__(self, config: WarmConfig | None = None, env: Mapping[str, str] | None = None,
                 on_retire: Callable[[str], None] | None = None):
        self.config = config or WarmConfig()
        self.env = dict(env or {})
        self.on_retire = on_retire or (lambda line: logger.warning("%s", line))
        self._log_dir = owned_tempdir(FRAY_POOL)
        self._results = owned_tempdir(FRAY_POOL_RESULTS)
        self._cleanup = weakref.finalize(self, remove_folders, self._log_dir, self._results)
        self._lock = threading.RLock()
        self._served: _Served | None = None
        self._queue: deque[PoolJobHandle] = deque()
        self._handles: list[PoolJobHandle] = []
        self._ids = itertools.count()
        self._started = 0
        self._closed = False
        self.retirements: list[str] = []
        """Every line said of a process that retired unclean, in order."""

    @property
    def processes_started(self) -> int:
        """How many processes this has started (each opens its devices again)."""
        return self._started

    @property
    def pid(self) -> int | None:
        """The live process's id, or None when there is none now."""
        served = self._served
        return served.process.pid if served is not None and not served.ended else None

    @property
    def free(self) -> bool:
        """True when no call runs or waits here: one submitted now starts at once (after the last
        call's cleanup, or in a new process)."""
        with self._lock:
            served = self._served
            return (not self._closed and not self._queue
                    and (served is None or served.ended or served.running is None))

    def _retired(self, line: str) -> None:
        self.retirements.append(line)
        self.on_retire(line)

    def _next(self) -> None:
        """Start the next waiting call, in a new process when the last one ended."""
        with self._lock:
            served = self._served
            if served is not None and served.ended:
                served = self._served = None
            if not self._queue or self._closed or (served is not None and not served.ready):
                return
            if served is None:
                self._started += 1
                served = self._served = _Served(self, self._started)
            served.start(self._queue.popleft())

    def submit(self, fn: Callable[..., Any], *args: Any, name: str | None = None, env: Mapping[str, str] | None = None,
               resources: ResourcesLike = None, **kwargs: Any) -> PoolJobHandle:
        """Run ``fn(*args, **kwargs)`` in the warm process, after the calls submitted before it."""
        ray_options_of(resources)  # reject a malformed request here as Ray would
        if self._closed:
            raise RuntimeError("the warm process was shut down")
        label = job_name(fn, name)
        call_id = next(self._ids)
        log_path = new_call_log(self._log_dir, call_id, label)
        handle = _WarmJobHandle(label, call_id, log_path, os.path.join(self._results, f"{call_id}.result"),
                                cloudpickle.dumps((fn, args, kwargs)), (), env or {})
        handle._owner = self
        self._handles.append(handle)
        with self._lock:
            self._queue.append(handle)
        self._next()
        return handle

    def create_actor(self, cls: type, *args: Any, name: str | None = None, env: Mapping[str, str] | None = None,
                     resources: ResourcesLike = None, **kwargs: Any) -> ActorHandle:
        raise NotImplementedError("a warm process runs calls, not actors: use fray.local.LocalClient for actors")

    def retire(self, wait_s: float = 0.0) -> None:
        """End the process once its call (if any) has ended, waiting up to ``wait_s`` for it to exit
        (then killing it); the next call starts a new process, once this one has exited."""
        served = self._served
        if served is not None:
            served.retire(wait_s)

    def shutdown(self) -> None:
        """Cancel what runs or waits, end the process, remove temporary folders."""
        self._closed = True
        with self._lock:
            waiting, self._queue = list(self._queue), deque()
            served, self._served = self._served, None
        for handle in waiting:
            handle._finish(("died", "the warm process was shut down", -1))
        for handle in self._handles:
            if not handle.done():
                handle.cancel(grace_s=1.0)
        self._handles.clear()
        if served is not None:
            served.retire(wait_s=5.0)
        self._cleanup()
