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
* a module is imported into the template only when the template stays single-threaded after
  importing it (forking a multi-threaded process is unsafe); one that starts threads on import
  is imported by each call's own process instead, and the template that imported it is replaced.

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
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle

from fray.process_job import Outcome, ProcessJobHandle
from fray.types import (
    ActorHandle,
    DistributedClient,
    ResourcesLike,
    job_name,
    ray_options_of,
)

__all__ = ["PoolConfig", "PoolJobHandle", "WorkerPool"]

_WATCH_INTERVAL_S = 0.2
_BOOTSTRAPPING = False  # True while a template imports its caller's __main__


@dataclass(frozen=True)
class PoolConfig:
    """How a :class:`WorkerPool` keeps its template process.

    Attributes:
        max_calls: calls forked from one template before it is replaced.
        preload: modules the template imports when it starts.
    """

    max_calls: int = 200
    preload: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if type(self.max_calls) is not int or self.max_calls < 1:
            raise ValueError(f"max_calls must be an int >= 1, got {self.max_calls!r}")
        if isinstance(self.preload, str) or not all(isinstance(m, str) and m for m in self.preload):
            raise ValueError(f"preload must be a tuple of module names, got {self.preload!r}")


# ---------------------------------------------------------------------------------------------
# Inside the template process.


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _import_into_template(modules: Sequence[str]) -> tuple[list[str], str | None]:
    """Import ``modules`` here: (names whose import failed, the name whose import started a thread).

    A failed import is left for the call's own process to repeat and report.
    """
    import importlib

    failed = []
    for name in modules:
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - the call's own process imports it again and reports
            failed.append(name)
            continue
        if _thread_count() > 1:
            return failed, name
    return failed, None


def _call_watchdog(template_pid: int) -> None:
    # The template dies only when the caller did (or it was killed): end this call's whole group.
    while True:
        if os.getppid() != template_pid:
            os.killpg(0, signal.SIGKILL)
        time.sleep(_WATCH_INTERVAL_S)


def _run_call(template_pid: int, inherited: Sequence[Any], payload: bytes, env: dict[str, str], log_path: str, result_path: str) -> None:
    """The body of a forked call: never returns."""
    code = 1
    try:
        for thing in inherited:  # the template's own channels are not this call's business
            thing.close()
        os.setsid()
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        threading.Thread(target=_call_watchdog, args=(template_pid,), daemon=True, name="fray-watchdog").start()
        os.environ.update(env)
        try:
            fn, args, kwargs = cloudpickle.loads(payload)
            message = ("ok", cloudpickle.dumps(fn(*args, **kwargs)), None)
        except BaseException as e:  # noqa: BLE001 - everything is reported to the caller
            import traceback

            tb = traceback.format_exc()
            sys.stderr.write(tb)
            message = ("error", f"{type(e).__name__}: {e}", tb)
        tmp = result_path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(cloudpickle.dumps(message))
        os.replace(tmp, result_path)  # whole or absent: a call killed mid-write "died"
        code = 0
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def template_main(fd: int, caller_pid: int, preload: Sequence[str]) -> None:
    """The template's loop: fork a child per call, report each start and exit to the caller."""
    conn = Connection(fd)
    # As multiprocessing's spawn does: the caller's sys.path, folder and ``__main__`` module (as
    # ``__mp_main__``), so what the caller pickled from its main script unpickles here.
    import multiprocessing.spawn

    global _BOOTSTRAPPING
    _BOOTSTRAPPING = True
    multiprocessing.spawn.prepare(conn.recv())
    _BOOTSTRAPPING = False
    _import_into_template(preload)
    if _thread_count() > 1:
        raise SystemExit(f"fray pool: preloading {list(preload)} started threads; a template must have one")
    selector = selectors.DefaultSelector()
    selector.register(conn, selectors.EVENT_READ, None)
    children: dict[int, tuple[int, int]] = {}  # read end of the exit pipe -> (call id, pid)
    retiring = False
    while True:
        if os.getppid() != caller_pid:
            for _call, pid in children.values():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
            os._exit(0)
        if retiring and not children:
            os._exit(0)
        for key, _ in selector.select(_WATCH_INTERVAL_S):
            if key.data is None:
                try:
                    request = conn.recv()
                except (EOFError, OSError):
                    retiring = True
                    selector.unregister(conn)
                    continue
                if request[0] == "retire":
                    retiring = True
                    continue
                _, call_id, modules, payload, env, log_path, result_path = request
                failed, threaded = _import_into_template(modules)
                if threaded is not None:
                    # Forking a multi-threaded process is unsafe: hand the call back, retire.
                    conn.send(("refused", call_id, threaded))
                    retiring = True
                    continue
                read_end, write_end = os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.close(read_end)
                    _run_call(os.getppid(), (conn, selector), payload, env, log_path, result_path)
                os.close(write_end)
                children[read_end] = (call_id, pid)
                selector.register(read_end, selectors.EVENT_READ, "exit")
                conn.send(("started", call_id, pid, failed))
            else:
                read_end = key.fd
                call_id, pid = children.pop(read_end)
                selector.unregister(read_end)
                os.close(read_end)
                _, status = os.waitpid(pid, 0)
                # Anything the call started and left behind in its group ends with it.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
                conn.send(("exited", call_id, os.waitstatus_to_exitcode(status)))


# ---------------------------------------------------------------------------------------------
# In the caller.


class _Template:
    """The caller's side of one template process."""

    def __init__(self, pool: WorkerPool, preload: Sequence[str]):
        import socket

        if _BOOTSTRAPPING:
            # The caller's script, imported here as multiprocessing's spawn would, starts work at
            # import: without this, every template would start another one, without end.
            raise RuntimeError("a worker pool was started while importing the main script into a worker; "
                               "put the script's work under `if __name__ == \"__main__\":`")

        ours, theirs = socket.socketpair()
        self.conn = Connection(ours.detach())
        child_fd = theirs.detach()
        code = "import sys; from fray.pool import template_main; template_main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])"
        # A session of its own: a Ctrl-C meant for the caller must not reach the template.
        self.process = subprocess.Popen([sys.executable, "-c", code, str(child_fd), str(os.getpid()), *preload],
                                        pass_fds=(child_fd,), stdin=subprocess.DEVNULL, start_new_session=True)
        os.close(child_fd)
        import multiprocessing.spawn

        data = multiprocessing.spawn.get_preparation_data("fray-pool-template")
        data.pop("authkey", None)  # not needed here, and never to be pickled
        self.conn.send(data)
        self.calls = 0
        self.retired = False
        self._pool = pool
        self._send_lock = threading.Lock()
        self._handles: dict[int, PoolJobHandle] = {}
        self._reader = threading.Thread(target=self._read, daemon=True, name="fray-pool-reader")
        self._reader.start()

    def send(self, message: tuple) -> bool:
        with self._send_lock:
            try:
                self.conn.send(message)
                return True
            except (OSError, ValueError):
                return False

    def start(self, handle: PoolJobHandle) -> None:
        self.calls += 1
        self._handles[handle.call_id] = handle
        modules = [m for m in handle._modules if m not in self._pool._refused]
        if not self.send(("run", handle.call_id, modules, handle._payload, handle._env, handle.log_path,
                          handle.result_path)):
            self._handles.pop(handle.call_id, None)
            handle._finish(("died", "the worker pool's template process is gone", -1))

    def retire(self) -> None:
        if not self.retired:
            self.retired = True
            self.send(("retire",))

    def _read(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                break
            kind, call_id, *rest = message
            handle = self._handles.get(call_id)
            if handle is None:
                continue
            if kind == "refused":
                self._handles.pop(call_id, None)
                self._pool._refused.add(rest[0])
                self.retired = True
                self._pool._start(handle)
            elif kind == "started":
                pid, failed = rest
                self._pool._refused.update(failed)
                handle._started(pid)
            else:
                self._handles.pop(call_id, None)
                handle._exited(rest[0])
                if handle._outcome is not None and handle._outcome[0] != "ok":
                    self.retire()
        self.process.wait()
        self.retired = True
        for handle in list(self._handles.values()):
            handle._finish(("died", f"the worker pool's template process exited ({self.process.returncode})", -1))
        self._handles.clear()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.conn.close()
        self.process.wait(timeout=5)


class PoolJobHandle(ProcessJobHandle):
    """A call running in a process forked from the pool's template; ``pid`` is that process."""

    def __init__(self, name: str, call_id: int, log_path: str, result_path: str, payload: bytes,
                 modules: Sequence[str], env: Mapping[str, str]):
        super().__init__(name, log_path)
        self._payload = payload
        self._modules = tuple(modules)
        self._env = dict(env)
        self.call_id = call_id
        self.result_path = result_path
        self._pid: int | None = None
        self._event = threading.Event()
        self._pid_known = threading.Event()
        self._on_finish: Callable[[], None] | None = None

    @property
    def pid(self) -> int | None:
        self._pid_known.wait(timeout=10)
        return self._pid

    def _started(self, pid: int) -> None:
        self._pid = pid
        self._pid_known.set()

    def _exited(self, code: int) -> None:
        try:
            with open(self.result_path, "rb") as f:
                outcome = cloudpickle.loads(f.read())
            os.unlink(self.result_path)
        except FileNotFoundError:
            outcome = ("died", f"process died with exit code {code}", code)
        self._finish(outcome)

    def _finish(self, outcome: Outcome) -> None:
        if self._outcome is None:
            self._outcome = outcome
        self._pid_known.set()
        self._event.set()
        if self._on_finish is not None:
            self._on_finish()

    def done(self) -> bool:
        return self._event.is_set()

    def _wait(self, timeout: float | None) -> bool:
        return self._event.wait(timeout)

    def _end(self, grace_s: float) -> None:
        pid = self.pid
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
        if not self._event.wait(grace_s):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            self._event.wait(5)


class WorkerPool(DistributedClient):
    """Runs each call in a process forked from a warm template (see the module docstring).

    Args:
        config: when to replace the template and what it imports at start.
        log_dir: where call output files go; default: a temporary folder removed at shutdown.
    """

    def __init__(self, config: PoolConfig | None = None, log_dir: str | os.PathLike | None = None):
        self.config = config or PoolConfig()
        self._own_log_dir = log_dir is None
        self._log_dir = str(log_dir) if log_dir is not None else tempfile.mkdtemp(prefix="fray-pool-")
        os.makedirs(self._log_dir, exist_ok=True)
        self._results = tempfile.mkdtemp(prefix="fray-pool-results-")
        self._cleanup = weakref.finalize(self, _remove_folders, self._results,
                                         self._log_dir if self._own_log_dir else None)
        self._lock = threading.Lock()
        self._template: _Template | None = None
        self._templates: list[_Template] = []
        self._refused: set[str] = set()  # modules that may not be imported into a template
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

    def _current(self) -> _Template:
        t = self._template
        if t is None or t.retired or t.process.poll() is not None or t.calls >= self.config.max_calls:
            if t is not None:
                t.retire()
            t = _Template(self, self.config.preload)
            self._template = t
            self._templates.append(t)
        return t

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
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:80]
        log_path = os.path.join(self._log_dir, f"{call_id:05d}-{safe}.log")
        open(log_path, "ab").close()
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


def _remove_folders(*folders: str | None) -> None:
    for folder in folders:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
