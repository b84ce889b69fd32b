"""Run functions elsewhere: the ``DistributedClient`` interface and its local implementation."""

from __future__ import annotations

import abc
import multiprocessing as mp
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DistributedClient", "JobFailed", "JobHandle", "JobCancelled", "LocalClient", "RemoteError"]


class JobFailed(RuntimeError):
    """A submitted function raised, or its process died; ``remote_traceback`` holds the details."""

    def __init__(self, message: str, remote_traceback: str | None = None, exitcode: int | None = None):
        super().__init__(message)
        self.remote_traceback = remote_traceback
        self.exitcode = exitcode


RemoteError = JobFailed


class JobCancelled(RuntimeError):
    """The job was cancelled before it finished."""


class JobHandle(abc.ABC):
    """A handle to one submitted function call."""

    name: str

    @abc.abstractmethod
    def done(self) -> bool:
        """True once the call finished (returned, raised, died or was cancelled)."""

    @abc.abstractmethod
    def result(self, timeout: float | None = None) -> Any:
        """Wait for and return the call's value; raise :class:`JobFailed` if it failed."""

    @abc.abstractmethod
    def cancel(self) -> None:
        """Stop the call and everything it started."""


class DistributedClient(abc.ABC):
    """Submits functions to run elsewhere and returns handles to them."""

    @abc.abstractmethod
    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        resources: Any = None,
        **kwargs: Any,
    ) -> JobHandle:
        """Run ``fn(*args, **kwargs)`` elsewhere; return a handle at once."""

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any], **submit_kwargs: Any) -> list[Any]:
        """Run ``fn`` over ``items`` in parallel and return the results in order."""
        handles = [self.submit(fn, item, **submit_kwargs) for item in items]
        try:
            return [h.result() for h in handles]
        except BaseException:
            for h in handles:
                h.cancel()
            raise

    def shutdown(self) -> None:
        """Release what the client holds."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()


def _watch_parent(parent_pid: int) -> None:
    # A worker whose parent died must not outlive it: it would write into an output that another
    # runner may by now have taken over.
    while True:
        if os.getppid() != parent_pid:
            os._exit(70)
        time.sleep(0.5)


def _child_main(conn, fn, args, kwargs, env, parent_pid) -> None:
    os.setsid()  # own process group, so cancel can end the whole tree
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    if env:
        os.environ.update(env)
    try:
        value = fn(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001 - everything is reported to the parent
        try:
            conn.send(("error", f"{type(e).__name__}: {e}", traceback.format_exc()))
        finally:
            conn.close()
        os._exit(1)
    try:
        conn.send(("ok", value, None))
    except Exception as e:  # noqa: BLE001 - an unpicklable result is the caller's error to see
        conn.send(("error", f"result could not be sent back: {type(e).__name__}: {e}", traceback.format_exc()))
    conn.close()


class _LocalHandle(JobHandle):
    def __init__(self, name: str, process, conn):
        self.name = name
        self._process = process
        self._conn = conn
        self._outcome: tuple[str, Any, str | None] | None = None
        self._cancelled = False
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def _poll(self, timeout: float | None) -> bool:
        with self._lock:
            if self._outcome is not None:
                return True
            if self._conn.poll(timeout if timeout is not None else None):
                try:
                    self._outcome = self._conn.recv()
                except EOFError:
                    pass
            if self._outcome is None and not self._process.is_alive():
                # Died without a word (killed, crashed in native code, os._exit).
                if self._conn.poll(0):
                    try:
                        self._outcome = self._conn.recv()
                    except EOFError:
                        pass
                if self._outcome is None:
                    self._process.join()
                    code = self._process.exitcode
                    reason = "cancelled" if self._cancelled else f"process died with exit code {code}"
                    self._outcome = ("died", reason, code)
            if self._outcome is not None:
                self._process.join(timeout=5)
            return self._outcome is not None

    def done(self) -> bool:
        return self._poll(0)

    def result(self, timeout: float | None = None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._poll(0.2):
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {self.name} did not finish within {timeout}s")
        kind, value, extra = self._outcome  # type: ignore[misc]
        if kind == "ok":
            return value
        if self._cancelled:
            raise JobCancelled(f"job {self.name} was cancelled")
        if kind == "error":
            raise JobFailed(f"job {self.name} failed: {value}", remote_traceback=extra)
        raise JobFailed(f"job {self.name} failed: {value}", exitcode=extra)

    def cancel(self) -> None:
        self._cancelled = True
        pid = self._process.pid
        if pid is None or not self._process.is_alive():
            return
        _kill_group(pid, signal.SIGTERM)
        self._process.join(timeout=5)
        if self._process.is_alive():
            _kill_group(pid, signal.SIGKILL)
            self._process.join(timeout=5)


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


@dataclass
class LocalClient(DistributedClient):
    """Runs each call in a fresh process started with ``spawn`` (nothing inherited by fork)."""

    def __post_init__(self) -> None:
        self._ctx = mp.get_context("spawn")
        self._handles: list[_LocalHandle] = []

    def submit(self, fn, *args, name=None, env=None, resources=None, **kwargs) -> JobHandle:
        parent_conn, child_conn = self._ctx.Pipe(duplex=False)
        process = self._ctx.Process(
            target=_child_main,
            args=(child_conn, fn, args, kwargs, dict(env or {}), os.getpid()),
            name=name or getattr(fn, "__name__", "job"),
            daemon=False,
        )
        process.start()
        child_conn.close()
        handle = _LocalHandle(name or process.name, process, parent_conn)
        self._handles.append(handle)
        return handle

    def shutdown(self) -> None:
        for handle in self._handles:
            if not handle.done():
                handle.cancel()
        self._handles.clear()
