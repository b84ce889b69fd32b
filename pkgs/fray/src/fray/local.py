"""Run calls in fresh local processes (``spawn``), each the leader of its own process group."""

from __future__ import annotations

import io
import itertools
import multiprocessing as mp
import os
import shutil
import signal
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import cloudpickle
import psutil

from fray.process_exit import exit_process
from fray.process_group import start_group_reaper, watch_parent
from fray.process_job import Outcome, ProcessJobHandle, new_call_log, outcome_value
from fray.types import (
    ActorHandle,
    DistributedClient,
    Future,
    JobCancelled,
    ResourcesLike,
    job_name,
    ray_options_of,
)
from rigging.process import running
from rigging.tempdirs import FRAY_LOGS, owned_tempdir

__all__ = ["LocalClient", "LocalJobHandle"]

def _enter_child(env: Mapping[str, str], parent_pid: int, log_path: str) -> None:
    """Common start of every child: own session, output into the log, watchdog, environment."""
    os.setsid()  # own process group, so cancel ends the whole tree
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    # File-descriptor level, so output of C code and of grandchildren lands in the log too.
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(line_buffering=True)
    start_group_reaper()  # before any thread of this process starts
    watch_parent(parent_pid)
    os.environ.update(env)


def _flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()


def _error_message(e: BaseException) -> tuple[str, str]:
    tb = traceback.format_exc()
    sys.stderr.write(tb)
    _flush_streams()
    return f"{type(e).__name__}: {e}", tb


def _job_main(conn, payload: bytes, env: dict[str, str], parent_pid: int, log_path: str) -> None:
    _enter_child(env, parent_pid, log_path)
    try:
        fn, args, kwargs = cloudpickle.loads(payload)
        value = fn(*args, **kwargs)
        message = ("ok", cloudpickle.dumps(value), None)
    except BaseException as e:  # noqa: BLE001 - everything is reported to the parent
        message = ("error", *_error_message(e))
    _flush_streams()
    conn.send(message)
    conn.close()
    exit_process(0 if message[0] == "ok" else 1)


def _actor_main(conn, payload: bytes, env: dict[str, str], parent_pid: int, log_path: str) -> None:
    _enter_child(env, parent_pid, log_path)
    try:
        cls, args, kwargs = cloudpickle.loads(payload)
        instance = cls(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001 - reported to the parent; the actor is then dead
        conn.send((None, "error", *_error_message(e)))
        exit_process(1)
    while True:
        try:
            request = conn.recv()
        except EOFError:
            break
        if request is None:
            break
        call_id, method, call_payload = request
        try:
            call_args, call_kwargs = cloudpickle.loads(call_payload)
            value = getattr(instance, method)(*call_args, **call_kwargs)
            reply = (call_id, "ok", cloudpickle.dumps(value), None)
        except BaseException as e:  # noqa: BLE001 - the caller sees it through its future
            reply = (call_id, "error", *_error_message(e))
        _flush_streams()
        conn.send(reply)
    _flush_streams()
    exit_process(0)


def _kill_tree(pid: int, descendants: list[psutil.Process], grace_s: float) -> None:
    """SIGTERM the group led by ``pid``, then SIGKILL it and every known descendant."""
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and (running(pid) or any(p.is_running() for p in descendants)):
        time.sleep(0.05)
    _signal_group(pid, signal.SIGKILL)
    for p in descendants:  # those that left the group (setsid) but were seen in the tree
        try:
            p.kill()
        except psutil.Error:
            pass


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class LocalJobHandle(ProcessJobHandle):
    """A call running in a local process; ``pid`` is that process, ``log_path`` its output."""

    def __init__(self, name: str, process, conn, log_path: str):
        super().__init__(name, log_path)
        self._process = process
        self._conn = conn
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def _poll(self, timeout: float) -> bool:
        with self._lock:
            if self._outcome is not None:
                return True
            self._outcome = self._reply(timeout)
            if self._outcome is None and not self._process.is_alive():
                # Its reply may have come after that look and before it exited: look once more (a
                # finished call was once reported dead "with exit code 0").
                self._outcome = self._reply(0)
                if self._outcome is None:
                    # Died without a word (killed, crashed in native code, os._exit).
                    self._process.join()
                    code = self._process.exitcode
                    self._outcome = ("died", f"process died with exit code {code}", code)
            if self._outcome is None:
                return False
            self._process.join(timeout=5)
            # Anything the job started and left behind in its group ends with it.
            _signal_group(self._process.pid, signal.SIGKILL)
            return True

    def _reply(self, timeout: float) -> Outcome | None:
        """The call's reply, if its pipe holds one within ``timeout`` seconds."""
        if self._conn.poll(timeout):
            try:
                return self._conn.recv()
            except EOFError:
                pass
        return None

    def done(self) -> bool:
        return self._poll(0)

    def _wait(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._poll(0.1):
            if deadline is not None and time.monotonic() > deadline:
                return False
        return True

    def _end(self, grace_s: float) -> None:
        pid = self._process.pid
        _kill_tree(pid, _descendants(pid), grace_s)
        self._process.join(timeout=5)
        self._poll(0)


class _LocalFuture(Future):
    def __init__(self, label: str):
        self._label = label
        self._event = threading.Event()
        self._outcome: Outcome | None = None
        self._cancelled = False

    def _set(self, outcome: Outcome) -> None:
        if not self._event.is_set():
            self._outcome = outcome
            self._event.set()

    def done(self) -> bool:
        return self._event.is_set()

    def result(self, timeout: float | None = None) -> Any:
        if not self._event.wait(timeout):
            raise TimeoutError(f"{self._label} did not finish within {timeout}s")
        if self._cancelled:  # then there is no outcome: what the actor sends later is dropped
            raise JobCancelled(f"{self._label} was cancelled")
        assert self._outcome is not None
        return outcome_value(self._label, self._outcome)

    def cancel(self) -> None:
        # A call already sent runs to its end in the actor; its result is dropped.
        if not self._event.is_set():
            self._cancelled = True
            self._event.set()


class _LocalActor(ActorHandle):
    def __init__(self, name: str, process, conn, log_path: str):
        self._name = name
        self._process = process
        self._conn = conn
        self.log_path = log_path
        self._ids = itertools.count()
        self._pending: dict[int, _LocalFuture] = {}
        self._lock = threading.Lock()
        self._dead: Outcome | None = None
        self._reader = threading.Thread(target=self._read, daemon=True, name=f"fray-actor-{name}")
        self._reader.start()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def _read(self) -> None:
        while True:
            try:
                call_id, kind, value, extra = self._conn.recv()
            except (EOFError, OSError):
                self._process.join(timeout=5)
                self._fail_all(("died", f"actor {self._name} died (exit code {self._process.exitcode})", None))
                return
            if call_id is None:  # the constructor raised
                self._fail_all((kind, f"constructing actor {self._name}: {value}", extra))
                return
            with self._lock:
                future = self._pending.pop(call_id, None)
            if future is not None:
                future._set((kind, value, extra))

    def _fail_all(self, outcome: Outcome) -> None:
        with self._lock:
            self._dead = outcome
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future._set(outcome)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Future:
        future = _LocalFuture(f"{self._name}.{method}")
        payload = cloudpickle.dumps((args, kwargs))
        with self._lock:
            if self._dead is not None:
                future._set(self._dead)
                return future
            call_id = next(self._ids)
            self._pending[call_id] = future
            try:
                self._conn.send((call_id, method, payload))
            except (BrokenPipeError, OSError):
                pass  # the reader thread reports the death
        return future

    def kill(self) -> None:
        pid = self._process.pid
        if self._process.is_alive():
            _kill_tree(pid, _descendants(pid), grace_s=1.0)
        self._process.join(timeout=5)
        self._reader.join(timeout=5)


class LocalClient(DistributedClient):
    """Runs each call in a fresh process started with ``spawn`` (nothing inherited by fork).

    ``resources`` are accepted and only their ``max_retries`` is used here: deciding what fits on
    the machine is iris's admission controller's job, done before submitting.

    Args:
        log_dir: where job output files go; default: a temporary folder removed at shutdown.
    """

    def __init__(self, log_dir: str | os.PathLike | None = None):
        self._ctx = mp.get_context("spawn")
        self._own_log_dir = log_dir is None
        self._log_dir = str(log_dir) if log_dir is not None else owned_tempdir(FRAY_LOGS)
        os.makedirs(self._log_dir, exist_ok=True)
        # A client dropped without shutdown() must not leave its temporary folder behind.
        self._cleanup = (
            weakref.finalize(self, shutil.rmtree, self._log_dir, ignore_errors=True) if self._own_log_dir else None
        )
        self._handles: list[LocalJobHandle] = []
        self._actors: list[_LocalActor] = []
        self._counter = itertools.count()

    def _spawn(self, target: Callable[..., None], payload: bytes, name: str, env: Mapping[str, str] | None,
               duplex: bool) -> tuple[Any, Any, str]:
        log_path = new_call_log(self._log_dir, next(self._counter), name)
        if duplex:
            parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        else:
            parent_conn, child_conn = self._ctx.Pipe(duplex=False)
        process = self._ctx.Process(
            target=target,
            args=(child_conn, payload, dict(env or {}), os.getpid(), log_path),
            name=name,
            daemon=False,
        )
        process.start()
        child_conn.close()
        return process, parent_conn, log_path

    def submit_payload(self, payload: bytes, *, name: str, env: Mapping[str, str] | None = None) -> LocalJobHandle:
        """Run an already cloudpickled ``(fn, args, kwargs)``; used by the Ray worker wrapper."""
        process, conn, log_path = self._spawn(_job_main, payload, name, env, duplex=False)
        handle = LocalJobHandle(name, process, conn, log_path)
        self._handles.append(handle)
        return handle

    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        resources: ResourcesLike = None,
        **kwargs: Any,
    ) -> LocalJobHandle:
        ray_options_of(resources)  # reject a malformed request here as Ray would
        payload = cloudpickle.dumps((fn, args, kwargs))
        return self.submit_payload(payload, name=job_name(fn, name), env=env)

    def create_actor(
        self,
        cls: type,
        *args: Any,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        resources: ResourcesLike = None,
        **kwargs: Any,
    ) -> ActorHandle:
        ray_options_of(resources)
        label = name or cls.__name__
        payload = cloudpickle.dumps((cls, args, kwargs))
        process, conn, log_path = self._spawn(_actor_main, payload, label, env, duplex=True)
        actor = _LocalActor(label, process, conn, log_path)
        self._actors.append(actor)
        return actor

    def shutdown(self) -> None:
        for handle in self._handles:
            if not handle.done():
                handle.cancel()
        for actor in self._actors:
            actor.kill()
        self._handles.clear()
        self._actors.clear()
        if self._cleanup is not None:
            self._cleanup()
