"""A call run in a local process of its own, as its caller sees it, however the process was made
(``spawn``-ed by :mod:`fray.local`, forked from a warm template by :mod:`fray.pool`).

Such a call ends with an *outcome*, a tuple ``(kind, value, extra)``:

* ``("ok", the pickled return value, None)``;
* ``("error", "Type: message", the traceback)``: the call raised;
* ``("died", a message, the exit code or None)``: its process ended without reporting.
"""

from __future__ import annotations

import abc
import os
from typing import Any

import cloudpickle

from fray.types import JobCancelled, JobFailed, JobHandle

__all__ = ["LOG_TAIL_LINES", "Outcome", "ProcessJobHandle", "new_call_log", "outcome_value"]

Outcome = tuple[str, Any, Any]

LOG_TAIL_LINES = 30
"""How many of a dead process's last output lines its failure carries: a native abort (a JAX
``LOG(FATAL)``, an out-of-memory kill's last words) says why only there, and a client's temporary
log folder is gone by the time anyone looks."""


def new_call_log(log_dir: str, number: int, label: str) -> str:
    """Make the (empty) log file of call ``number`` named ``label`` in ``log_dir``; returns its path,
    ``<number, 5 digits>-<label, made safe for a file name, at most 80 characters>.log``."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:80]
    path = os.path.join(log_dir, f"{number:05d}-{safe}.log")
    open(path, "ab").close()
    return path


def outcome_value(label: str, outcome: Outcome, cancelled: bool = False) -> Any:
    """The value of a finished call, or its error raised; ``label`` names the call in messages.

    Raises:
        JobCancelled: the call did not return and was cancelled.
        JobFailed: the call raised, or its process died.
    """
    kind, value, extra = outcome
    if kind == "ok":
        return cloudpickle.loads(value)
    if cancelled:
        raise JobCancelled(f"{label} was cancelled")
    if kind == "error":
        raise JobFailed(f"{label} failed: {value}", remote_traceback=extra)
    raise JobFailed(f"{label} failed: {value}", exitcode=extra)


class ProcessJobHandle(JobHandle):
    """A call running in a local process that leads its own process group and writes its output
    to ``log_path``; ``pid`` is that process."""

    def __init__(self, name: str, log_path: str):
        self.name = name
        self.log_path = log_path
        self._outcome: Outcome | None = None
        self._cancelled = False

    @abc.abstractmethod
    def _wait(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds (None: for ever) for the outcome; True once it is known."""

    @abc.abstractmethod
    def _end(self, grace_s: float) -> None:
        """End the running call's process and what it started, giving it ``grace_s`` after SIGTERM."""

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds (None: for ever) for the call to end, however it ends;
        True once it has (then :meth:`result` returns or raises at once)."""
        return self._wait(timeout)

    def result(self, timeout: float | None = None) -> Any:
        if not self._wait(timeout):
            raise TimeoutError(f"job {self.name} did not finish within {timeout}s")
        assert self._outcome is not None
        kind, value, extra = self._outcome
        if kind == "died" and not self._cancelled:
            value = f"{value}; its last output:\n{self._log_tail()}"
        return outcome_value(f"job {self.name}", (kind, value, extra), self._cancelled)

    def _log_tail(self) -> str:
        lines = self.logs().splitlines()[-LOG_TAIL_LINES:]
        return "\n".join(lines) if lines else "(nothing)"

    def cancel(self, grace_s: float | None = None) -> None:
        """End the call's process and everything it started (SIGTERM, then SIGKILL after ``grace_s``,
        3 s by default; 0: SIGKILL at once)."""
        if self.done():
            return
        self._cancelled = True
        self._end(3.0 if grace_s is None else grace_s)

    def logs(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""
