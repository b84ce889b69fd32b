"""Warm local workers: calls run in processes forked from a long-lived, already-imported worker.

Starting a fresh Python process and importing a step's packages costs hundreds of milliseconds;
the call itself is often a few. A :class:`WorkerPool` keeps one long-lived *template* process
(started fresh with ``spawn``: nothing inherited from the caller) that imports what calls need
once, and runs each call in a child ``fork``-ed from it:

* each call gets a process of its own, a copy of the template as it was before any call ran: a
  module global set or a thread left running by one call is never seen by the next;
* a call that kills its process (``os._exit``, a segfault, the OOM killer) fails alone, with
  its exit code, like a fresh process would; the template is untouched;
* the template is replaced after a call fails and after ``max_calls`` calls (so what it has
  imported for earlier calls does not grow without end);
* the template keeps what calls import (``learn_imports``): what a call imported is imported
  into the template too, for later calls, once a throwaway fork of the template showed it safe;
* a template must stay safe to fork: one thread (forking a multi-threaded process is unsafe) and
  no JAX (``never_in_template``: it initialises in each call's own process). Its BLAS runs on one
  thread, so numpy may be imported; each call gets its caller's BLAS threads back
  (:mod:`fray.template_blas`). A module a call asked for (``preload``) that breaks this is
  imported by each call's own process instead, and the template replaced. The rule, and
  learning: :mod:`fray.template_imports`.

Each call's process leads its own process group (cancel ends everything it started) and watches
its template, which watches the caller: if the caller dies (even by SIGKILL) every call's
process group is killed within a fraction of a second. The template is in a session of its own,
so a Ctrl-C at the terminal reaches the caller, which cancels what it runs.

What needs a fresh interpreter (devices to itself, variables read when a package is imported)
should go to :class:`fray.local.LocalClient` instead; deciding that is the caller's job.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cloudpickle

from fray import pool_template
from fray.pool_job import PoolJobHandle
from fray.pool_messages import (
    Exited,
    Learn,
    Learned,
    Prepare,
    Refused,
    Retire,
    Run,
    Started,
    TemplateSettings,
    ToCaller,
    ToTemplate,
    UnsafeMain,
)
from fray.process_job import new_call_log
from fray.template_blas import template_environment
from fray.template_imports import NEVER_IN_TEMPLATE, ModuleEntry, under
from fray.types import ActorHandle, DistributedClient, ResourcesLike, job_name, ray_options_of
from fray.worker_process import preparation_data, remove_folders, start_worker
from rigging.tempdirs import FRAY_POOL, FRAY_POOL_RESULTS, owned_tempdir

__all__ = ["PoolConfig", "PoolJobHandle", "WorkerPool"]

@dataclass(frozen=True)
class PoolConfig:
    """How a :class:`WorkerPool` keeps its template process.

    Attributes:
        max_calls: calls forked from one template before it is replaced.
        preload: modules the template imports when it starts.
        learn_imports: after a call returns, import into the template what it imported (if that
            is safe: see :mod:`fray.template_imports`), so that later calls find it imported.
        never_in_template: packages never imported into a template, nor any module that imports
            them: they must initialise in each call's own process.
    """

    max_calls: int = 200
    preload: tuple[str, ...] = ()
    learn_imports: bool = True
    never_in_template: tuple[str, ...] = NEVER_IN_TEMPLATE

    def __post_init__(self) -> None:
        if type(self.max_calls) is not int or self.max_calls < 1:
            raise ValueError(f"max_calls must be an int >= 1, got {self.max_calls!r}")
        for field in ("preload", "never_in_template"):
            names = getattr(self, field)
            if isinstance(names, str) or not all(isinstance(m, str) and m for m in names):
                raise ValueError(f"{field} must be a tuple of module names, got {names!r}")


class _Template:
    """The caller's side of one template process (its own side: :mod:`fray.pool_template`)."""

    def __init__(self, pool: WorkerPool, preload: Sequence[str]):
        if pool_template.BOOTSTRAPPING:
            # The caller's script, imported here as multiprocessing's spawn would, starts work at
            # import: without this, every template would start another one, without end.
            raise RuntimeError("a worker pool was started while importing the main script into a worker; "
                               "put the script's work under `if __name__ == \"__main__\":`")

        self.conn, self.process = start_worker("fray.pool_template:template_main", preload,
                                               template_environment(os.environ))
        data = preparation_data("fray-pool-template")
        config = pool.config
        self.conn.send(Prepare(data, TemplateSettings(config.never_in_template, config.learn_imports,
                                                      main_in_calls=pool._main_in_calls)))
        self.calls = 0
        self.retired = False
        self.unsafe_main = False
        self.taught = 0  # how many of the pool's learned modules were sent to this template
        self.settled = threading.Event()  # set while it has nothing left to learn
        self.settled.set()
        # The pool is held weakly, so that one dropped without shutdown() is collected and its
        # finalizer ends this process; strongly by each call in flight (its outcome comes through it).
        self._pool_ref = weakref.ref(pool)
        self._holds: dict[int, WorkerPool] = {}
        self._send_lock = threading.Lock()
        self._handles: dict[int, PoolJobHandle] = {}
        self._reader = threading.Thread(target=self._read, daemon=True, name="fray-pool-reader")
        self._reader.start()

    @property
    def _pool(self) -> WorkerPool:
        pool = self._pool_ref()
        if pool is None:  # only asked for while it is held (a call in flight), or after a check
            raise RuntimeError("the worker pool of this template was dropped")
        return pool

    def _pop(self, call_id: int) -> PoolJobHandle | None:
        """The call's handle, no longer in flight here (nor holding the pool)."""
        self._holds.pop(call_id, None)
        return self._handles.pop(call_id, None)

    def send(self, message: Prepare | ToTemplate) -> bool:
        with self._send_lock:
            try:
                self.conn.send(message)
                return True
            except (OSError, ValueError):
                return False

    def start(self, handle: PoolJobHandle) -> None:
        self.calls += 1
        self._handles[handle.call_id] = handle
        self._holds[handle.call_id] = self._pool
        modules = [m for m in handle._modules if not under(m, self._pool._refused)]
        if not self.send(Run(handle.call_id, modules, handle._payload, handle._env, handle.log_path,
                             handle.result_path)):
            self._pop(handle.call_id)
            handle._finish(("died", "the worker pool's template process is gone", -1))

    def teach(self, learned: Sequence[ModuleEntry], refused: set[str]) -> None:
        """Send the learned modules this template has not been sent yet (with what is refused)."""
        entries = [(name, origin) for name, origin in learned[self.taught:] if not under(name, refused)]
        self.taught = len(learned)
        if entries and not self.retired:
            self.settled.clear()
            if not self.send(Learn(entries, sorted(refused))):
                self.settled.set()

    def retire(self) -> None:
        if not self.retired:
            self.retired = True
            self.send(Retire())

    def _read(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                break
            self._on_message(message)
        self.process.wait()
        self.retired = True
        self.settled.set()
        handles, self._handles = list(self._handles.values()), {}
        for handle in handles:
            if self.unsafe_main:
                self._pool._start(handle)
            else:
                handle._finish(("died", f"the worker pool's template process exited ({self.process.returncode})", -1))
        self._holds.clear()

    def _on_message(self, message: ToCaller) -> None:
        pool = self._pool_ref()
        if isinstance(message, UnsafeMain):
            # Importing the caller's main script made the template unsafe to fork; it exits,
            # and what was sent to it goes to one that leaves main to each call (see _read).
            self.unsafe_main = self.retired = True
            if pool is not None:
                pool._main_in_calls = True
            return
        if isinstance(message, Learned):
            if pool is not None:
                pool._refused.update(message.excluded)
            self.retired = self.retired or message.unsafe
            if not message.more:
                self.settled.set()
            return
        handle = self._handles.get(message.call_id)
        if handle is None:
            return
        # A call in flight: it holds the pool.
        if isinstance(message, Refused):
            self._pop(message.call_id)
            self._pool._refused.add(message.module)
            self.retired = True
            self._pool._start(handle)
        elif isinstance(message, Started):
            self._pool._refused.update(message.failed)
            handle._started(message.pid)
        elif isinstance(message, Exited):
            outcome, learned = pool_template.read_result(handle.result_path, message.code)
            if learned:  # taught before the caller hears of the result: settle() then waits for it
                self._pool._learn(learned)
            self._pop(message.call_id)
            handle._finish(outcome)
            if handle._outcome is not None and handle._outcome[0] != "ok":
                self.retire()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.conn.close()
        self.process.wait(timeout=5)


def _release(templates: list[_Template], *folders: str | None) -> None:
    """What a pool leaves behind, at shutdown() (its templates have exited by then) or when it is
    dropped without one (it has no call in flight then: a call holds its pool): its templates'
    processes, killed with what they started (a learning probe), and its folders."""
    for t in templates:
        if t.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(t.process.pid, signal.SIGKILL)
    remove_folders(*folders)


class WorkerPool(DistributedClient):
    """Runs each call in a process forked from a warm template (see the module docstring).

    Args:
        config: when to replace the template and what it imports at start.
        log_dir: where call output files go; default: a temporary folder removed at shutdown.
    """

    def __init__(self, config: PoolConfig | None = None, log_dir: str | os.PathLike | None = None):
        self.config = config or PoolConfig()
        self._own_log_dir = log_dir is None
        self._log_dir = str(log_dir) if log_dir is not None else owned_tempdir(FRAY_POOL)
        os.makedirs(self._log_dir, exist_ok=True)
        self._results = owned_tempdir(FRAY_POOL_RESULTS)
        self._lock = threading.Lock()
        self._template: _Template | None = None
        self._templates: list[_Template] = []
        # A pool dropped without shutdown() must not leave its template running (an idle process
        # of its caller's imports, waking every WATCH_INTERVAL_S) until its caller exits.
        self._cleanup = weakref.finalize(self, _release, self._templates, self._results,
                                         self._log_dir if self._own_log_dir else None)
        self._refused: set[str] = set()  # modules (and all under them) never imported into a template
        self._learned: list[ModuleEntry] = []  # modules calls imported, in order, and where found
        self._learned_names: set[str] = set()
        self._main_in_calls = False  # the caller's __main__ is imported by each call, not the template
        self._handles: list[PoolJobHandle] = []
        self._ids = itertools.count()
        self._closed = False
        self._finished = threading.Event()

    def wait_any(self, timeout: float) -> bool:
        """Wait until some call of this pool finishes (or ``timeout`` seconds); True if one did.

        For a scheduler that would otherwise poll: it wakes as soon as there is news.
        """
        finished = self._finished.wait(timeout)
        self._finished.clear()
        return finished

    @property
    def templates_started(self) -> int:
        """How many template processes this pool has started (each costs an interpreter start)."""
        return len(self._templates)

    def warm(self) -> None:
        """Start the template now rather than at the first call."""
        with self._lock:
            self._current()

    def settle(self, timeout: float) -> bool:
        """Wait until the current template has imported (or excluded) what calls taught it; True if it did.

        Learning goes on beside the calls: a call started meanwhile may not find everything imported.
        """
        t = self._template
        return t is None or t.settled.wait(timeout)

    def _current(self) -> _Template:
        t = self._template
        if t is None or t.retired or t.process.poll() is not None or t.calls >= self.config.max_calls:
            if t is not None:
                t.retire()
            t = _Template(self, self.config.preload)
            self._template = t
            self._templates.append(t)
            t.teach(self._learned, self._refused)
        return t

    def _learn(self, entries: Sequence[ModuleEntry]) -> None:
        """Remember what a call imported and teach it to the current template."""
        with self._lock:
            for name, origin in entries:
                if name not in self._learned_names:
                    self._learned_names.add(name)
                    self._learned.append((name, origin))
            t = self._template
            if t is not None and not t.retired:
                t.teach(self._learned, self._refused)

    def _start(self, handle: PoolJobHandle) -> None:
        with self._lock:
            if self._closed:
                handle._finish(("died", "the worker pool was shut down", -1))
                return
            self._current().start(handle)

    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        resources: ResourcesLike = None,
        preload: Sequence[str] = (),
        **kwargs: Any,
    ) -> PoolJobHandle:
        """Run ``fn(*args, **kwargs)`` in a forked process.

        Args:
            preload: modules to import into the template before forking (kept for later calls),
                besides ``fn``'s own module.
        """
        ray_options_of(resources)  # reject a malformed request here as Ray would
        if self._closed:
            raise RuntimeError("the worker pool was shut down")
        label = job_name(fn, name)
        payload = cloudpickle.dumps((fn, args, kwargs))
        modules = [m for m in (getattr(fn, "__module__", None), *preload) if m and m != "__main__"]
        call_id = next(self._ids)
        log_path = new_call_log(self._log_dir, call_id, label)
        handle = PoolJobHandle(label, call_id, log_path, os.path.join(self._results, f"{call_id}.result"),
                               payload, modules, env or {})
        handle._on_finish = self._finished.set
        self._handles.append(handle)
        self._start(handle)
        return handle

    def create_actor(self, cls: type, *args: Any, name: str | None = None, env: Mapping[str, str] | None = None,
                     resources: ResourcesLike = None, **kwargs: Any) -> ActorHandle:
        raise NotImplementedError("WorkerPool runs calls, not actors: use fray.local.LocalClient for actors")

    def shutdown(self) -> None:
        """Cancel running calls, stop every template, remove temporary folders."""
        self._closed = True
        for handle in self._handles:
            if not handle.done():
                handle.cancel(grace_s=1.0)
        self._handles.clear()
        for t in self._templates:
            t.retire()
            try:
                t.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                t.kill()
        self._template = None
        self._cleanup()
