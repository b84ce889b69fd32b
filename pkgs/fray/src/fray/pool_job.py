"""A call of a :class:`fray.pool.WorkerPool` as its caller sees it: a process forked from the
pool's template, which tells the caller when it started and when it exited."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Mapping, Sequence

from fray.process_job import Outcome, ProcessJobHandle

__all__ = ["PoolJobHandle"]


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
